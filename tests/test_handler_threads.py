"""The sync Worker's handler threads (issue 24): slow work runs on every
thread at once, no handoff is left waiting while a thread sleeps, and
shutdown runs what was handed over (guards for any change to how the
threads are woken: waking one thread per handoff without the next being
woken fails the first test). The worker
itself is tested end to end in tests/test_worker.py and
tests/test_job_timeouts.py; the speed is measured by
``python -m pyqueue.bench.python_side``, not here."""

from __future__ import annotations

import random
import threading
import time
from functools import partial

from pyqueue.worker.handler_threads import HandlerThreads

WAIT = 10.0  # seconds: far longer than any of these takes


def test_slow_work_runs_on_every_thread_at_once() -> None:
    # Every item waits at a barrier for `size` of them: only all threads
    # running at once get past it.
    size = 6
    threads = HandlerThreads(size, "test-handler")
    barrier = threading.Barrier(size, timeout=WAIT)
    passed: list[int] = []
    lock = threading.Lock()

    def item(k: int) -> None:
        barrier.wait()
        with lock:
            passed.append(k)

    try:
        threads.put_many([partial(item, k) for k in range(size)])
        deadline = time.monotonic() + WAIT
        while len(passed) < size and time.monotonic() < deadline and not barrier.broken:
            time.sleep(0.01)
        assert not barrier.broken, "the threads never all ran at once"
        assert sorted(passed) == list(range(size))
    finally:
        assert threads.shutdown(WAIT)


def test_handoffs_of_any_size_are_all_run() -> None:
    # Batches of 1 to 30 quick items, some while every thread sleeps, some
    # while threads are busy: each item runs exactly once.
    threads = HandlerThreads(4, "test-handler")
    rng = random.Random(24)
    ran: list[int] = []
    lock = threading.Lock()

    def item(k: int) -> None:
        if k % 7 == 0:
            time.sleep(0.001)
        with lock:
            ran.append(k)

    handed = 0
    try:
        for _ in range(300):
            n = rng.randint(1, 30)
            threads.put_many([partial(item, k) for k in range(handed, handed + n)])
            handed += n
            if rng.random() < 0.3:
                deadline = time.monotonic() + WAIT
                while len(ran) < handed and time.monotonic() < deadline:
                    time.sleep(0.0005)
                assert len(ran) == handed, "a handoff was left waiting while the threads slept"
    finally:
        assert threads.shutdown(WAIT)
    assert sorted(ran) == list(range(handed))


def test_shutdown_runs_what_was_handed_over() -> None:
    threads = HandlerThreads(3, "test-handler")
    ran: list[int] = []
    lock = threading.Lock()

    def item(k: int) -> None:
        time.sleep(0.002)
        with lock:
            ran.append(k)

    threads.put_many([partial(item, k) for k in range(40)])
    assert threads.shutdown(WAIT)
    assert sorted(ran) == list(range(40))
