"""The sync Worker's handler threads (issue 24): slow work runs on every
thread at once, no handoff is left waiting while a thread sleeps, and
shutdown runs what was handed over (guards for any change to how the
threads are woken: waking one thread per handoff without the next being
woken fails the first test). A lazy handoff (the Worker's) wakes one
thread, and more only through ``spread()``: its tests check both halves. The worker
itself is tested end to end in tests/test_worker.py and
tests/test_job_timeouts.py; the speed is measured by
``python -m pyqueue.bench.python_side``, not here."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import pytest

from pyqueue.worker.handler_threads import SPREAD_AFTER, HandlerThreads

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


@contextmanager
def spreading(threads: HandlerThreads) -> Iterator[None]:
    """What a Worker's loop does for its lazy threads: call spread() as often as it says."""
    done = threading.Event()

    def owner() -> None:
        while not done.is_set():
            done.wait(threads.spread() or 0.001)

    thread = threading.Thread(target=owner, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(WAIT)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_handoffs_of_any_size_are_all_run(lazy: bool) -> None:
    # Batches of 1 to 30 quick items, some while every thread sleeps, some
    # while threads are busy: each item runs exactly once.
    threads = HandlerThreads(4, "test-handler", lazy=lazy)
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
        with spreading(threads):
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


def test_a_lazy_handoff_of_quick_work_wakes_one_thread() -> None:
    # The threads all sleep; 300 quick items handed over at once are run by
    # the one thread woken (no spread() call: nothing waited long), each
    # item given to run() as it is. Each lets go of the GIL, as a handler
    # does: a thread woken for nothing would take some.
    ran: list[tuple[int, int]] = []

    def run(k: int) -> None:
        time.sleep(0)
        ran.append((k, threading.get_ident()))

    threads = HandlerThreads(8, "test-handler", run=run, lazy=True)
    try:
        time.sleep(0.05)  # every thread waits for work
        threads.put_many(range(300))
        deadline = time.monotonic() + WAIT
        while len(ran) < 300 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert sorted(k for k, _ in ran) == list(range(300))
        assert len({ident for _, ident in ran}) == 1, "a quick handoff woke more than one thread"
        assert threads.spread() is None  # nothing waits
    finally:
        assert threads.shutdown(WAIT)


def test_a_lazy_handoff_of_slow_work_is_spread_to_every_thread() -> None:
    # As the first test, lazily: the thread woken blocks at the barrier, so
    # the items wait with none taken, and spread() must wake every thread.
    size = 6
    threads = HandlerThreads(size, "test-handler", lazy=True)
    barrier = threading.Barrier(size, timeout=WAIT)
    passed: list[int] = []

    def item(k: int) -> None:
        barrier.wait()
        passed.append(k)

    try:
        with spreading(threads):
            time.sleep(0.05)
            threads.put_many([partial(item, k) for k in range(size)])
            deadline = time.monotonic() + WAIT
            while len(passed) < size and time.monotonic() < deadline and not barrier.broken:
                time.sleep(0.01)
        assert not barrier.broken, "the items waited behind a blocked thread while the others slept"
        assert sorted(passed) == list(range(size))
    finally:
        assert threads.shutdown(WAIT)


def test_spread_leaves_the_others_asleep_while_the_thread_woken_has_not_run_yet() -> None:
    # On a busy machine the thread a handoff woke may wait for a CPU longer
    # than SPREAD_AFTER (issue 24: 16 worker processes on 2 cores). It is
    # held here where it must get the threads' lock back before running:
    # the items wait, none taken, and waking the others would only have them
    # wait too. Once it runs it takes them all, and still no other wakes.
    ran: list[int] = []
    threads = HandlerThreads(4, "test-handler", run=lambda k: ran.append(threading.get_ident()), lazy=True)
    try:
        deadline = time.monotonic() + WAIT
        while threads._sleeping < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        with threads._cond:  # re-entrant: spread() takes it too
            threads.put_many(range(3))
            time.sleep(2 * SPREAD_AFTER)
            assert threads.spread() == SPREAD_AFTER  # it says when to look again
            assert len(threads._cond._waiters) == 3, "spread() woke the threads still asleep"  # type: ignore[attr-defined]
        while len(ran) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(ran) == 3 and len(set(ran)) == 1
    finally:
        assert threads.shutdown(WAIT)


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
