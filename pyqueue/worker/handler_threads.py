"""The handler threads of a sync Worker: a fixed set of threads taking work
from one queue. Cheaper per job than a ThreadPoolExecutor (no Future, one
wake-up per batch rather than per job): a worker hands over a whole claimed
batch at once, as the jobs themselves (``run`` is called with each: no
callable made per job), and a thread that finds work waiting takes it
without a lock.

``lazy=True`` (the Worker's): a handoff wakes one sleeping thread, not one
per item. Quick handlers (the no-op jobs of a benchmark) are then all run by
the thread woken, which takes one item after the other without a lock,
while the others sleep on: waking them would only have them wait for the
GIL and switch back and forth. Slow handlers need every thread, so the
owner calls :meth:`spread` whenever it wakes (and at least as often as it
says): once items have waited SPREAD_AFTER seconds with none taken
meanwhile, every sleeping thread is woken; but not while a thread woken
for them has not run yet. On a busy machine (more runnable threads than
cores: many worker processes) that thread may wait for a CPU longer than
SPREAD_AFTER; the threads that waking all would add could only wait for a
CPU and the GIL with it, switching back and forth, for nothing (issue 24:
W=16 worker processes on 2 cores). Without an owner calling it, leave
``lazy`` off: every handoff wakes as many threads as items."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

logger = logging.getLogger("pyqueue.worker")

Work = Any  # an item handed over: what ``run`` is called with
SPREAD_AFTER = 0.002  # seconds items may wait, none taken, before a lazy handoff wakes every thread


def _call(work: Callable[[], object]) -> object:
    return work()


class HandlerThreads:
    """``size`` threads calling ``run(item)`` for the items handed to
    :meth:`put_many`, in order (default: each item is a callable, called)."""

    def __init__(self, size: int, name: str, run: Callable[[Any], object] = _call, *,
                 lazy: bool = False) -> None:
        self._run_item = run
        self._lazy = lazy
        self._taken = 0  # items taken so far (racy increments: only ever compared for a change)
        self._mark = (0, 0.0)  # lazy: _taken when items started waiting or were last seen taken, and when
        self._sleeping = 0  # threads waiting in _next (under _cond)
        self._waking = 0  # of those, notified and not yet back from the wait: they have not run yet
        self._work: deque[Work] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._name = name
        self._started = 0
        self._threads: list[threading.Thread] = []
        self._retired: set[int] = set()  # idents of threads left to a handler given up on
        for _ in range(size):
            self._start()

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name=f"{self._name}-{self._started}", daemon=True)
        self._started += 1
        self._threads.append(thread)
        thread.start()

    def replace(self, ident: int) -> None:
        """The thread ``ident`` runs a handler the worker gave up on (its job
        timed out): start another in its place; that one ends when its
        handler returns, if ever."""
        with self._cond:
            if ident in self._retired or self._closing:
                return
            self._retired.add(ident)
            self._threads = [t for t in self._threads if t.ident != ident]
            self._start()

    def put_many(self, work: Iterable[Work]) -> None:
        with self._cond:
            before = len(self._work)
            self._work.extend(work)
            added = len(self._work) - before
            if not added:
                return
            if not self._lazy:
                self._notify(added)
            elif not before:  # none waited: one thread takes these, spread() wakes more if it is stuck
                self._mark = (self._taken, time.monotonic())
                self._notify(1)

    def _notify(self, count: int) -> None:
        """Wake ``count`` sleeping threads (under _cond); Condition.notify
        wakes only threads not notified yet."""
        self._waking += max(0, min(count, self._sleeping - self._waking))
        self._cond.notify(count)

    def spread(self) -> float | None:
        """(lazy) Wake every sleeping thread when items have waited
        SPREAD_AFTER seconds with none taken meanwhile (the threads awake
        are busy with slow handlers). Seconds until it should be called
        again; None when no item waits."""
        if not self._lazy or not self._work:
            return None
        with self._cond:
            if not self._work:
                return None
            now = time.monotonic()
            taken, since = self._mark
            if self._taken != taken:
                self._mark = (self._taken, now)  # some were taken: the threads awake keep up
                return SPREAD_AFTER
            if now - since < SPREAD_AFTER:
                return since + SPREAD_AFTER - now
            if self._waking:
                return SPREAD_AFTER  # a thread woken for them waits for a CPU: more would wait with it
            self._notify(len(self._work))
            self._mark = (self._taken, now)
            return SPREAD_AFTER

    def _next(self) -> Work | None:
        """The next item, waiting for one; None when closing and none is left."""
        with self._cond:
            while not self._work:
                if self._closing:
                    return None
                self._sleeping += 1
                try:
                    self._cond.wait()
                finally:
                    self._sleeping -= 1
                    if self._waking:
                        self._waking -= 1
            self._taken += 1
            return self._work.popleft()

    def _run(self) -> None:
        me = threading.get_ident()
        run = self._run_item
        popleft = self._work.popleft
        retired = self._retired
        while True:
            try:
                work = popleft()  # atomic: no lock needed while work waits
                self._taken += 1
            except IndexError:
                if (work := self._next()) is None:
                    return
            try:
                run(work)
            except BaseException:
                logger.exception("a handler thread's work raised")
            if me in retired:
                return  # replaced while its handler ran late

    def shutdown(self, timeout: float | None = None) -> bool:
        """Run what was handed over, then end the threads; wait at most
        ``timeout`` seconds (None: without end). False when some thread is
        still busy then (a hung handler: it is left to run, as a daemon)."""
        with self._cond:
            self._closing = True
            self._waking = self._sleeping
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)
