"""The handler threads of a sync Worker: a fixed set of threads taking work
from one queue. Cheaper per job than a ThreadPoolExecutor (no Future, one
wake-up per batch rather than per job): a worker hands over a whole claimed
batch at once, and a thread that finds work waiting takes it without a lock."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

logger = logging.getLogger("pyqueue.worker")

Work = Callable[[], object]


class HandlerThreads:
    """``size`` threads running the callables handed to :meth:`put_many`, in order."""

    def __init__(self, size: int, name: str) -> None:
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
            if added:
                self._cond.notify(added)

    def _next(self) -> Work | None:
        try:
            return self._work.popleft()  # atomic: no lock needed while work waits
        except IndexError:
            pass
        with self._cond:
            while not self._work:
                if self._closing:
                    return None
                self._cond.wait()
            return self._work.popleft()

    def _run(self) -> None:
        me = threading.get_ident()
        while (work := self._next()) is not None:
            try:
                work()
            except BaseException:
                logger.exception("a handler thread's work raised")
            if me in self._retired:
                return  # replaced while its handler ran late

    def shutdown(self, timeout: float | None = None) -> bool:
        """Run what was handed over, then end the threads; wait at most
        ``timeout`` seconds (None: without end). False when some thread is
        still busy then (a hung handler: it is left to run, as a daemon)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)
