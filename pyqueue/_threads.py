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
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(size)]
        for thread in self._threads:
            thread.start()

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
        while (work := self._next()) is not None:
            try:
                work()
            except BaseException:
                logger.exception("a handler thread's work raised")

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
