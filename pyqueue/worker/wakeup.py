"""How a sync worker waits and stops: :class:`Wakeup` (a stop flag and a
self-pipe a waiting loop selects on) and :func:`stop_on_signals`."""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from pyqueue.defaults import STOP_CHECK_INTERVAL

logger = logging.getLogger("pyqueue.worker")


class Wakeup:
    """A stop flag plus a self-pipe, so that a waiting loop wakes at once when
    stopped (by a signal or another thread) or poked (a handler finished).

    A caller-supplied ``threading.Event`` cannot poke the pipe, so when one is
    given it is also checked every STOP_CHECK_INTERVAL seconds.
    """

    def __init__(self, event: threading.Event | None = None) -> None:
        self._external = event is not None
        self.event = event if event is not None else threading.Event()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._selector = selectors.DefaultSelector()  # kept: no epoll set-up per wait
        self._selector.register(self._read_fd, selectors.EVENT_READ)
        self._closed = False

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def stop(self) -> None:
        """Ask the loop to stop (safe from signal handlers and other threads)."""
        self.event.set()
        self.poke()

    def poke(self) -> None:
        """Wake the loop if it waits."""
        if self._closed:
            return
        # A full pipe already holds a wake-up; a closed one has nobody waiting.
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, but not past a stop; a poke does not end it (it
        stays pending for the next :meth:`wait`). What a consumer's ``Sleep``
        is: a backoff, or the wait before a claim on a NOTIFY, which a
        handler finishing must not cut short (see ``polling.NotifyThrottle``)."""
        self.event.wait(seconds)

    def _drain(self) -> None:
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> list[int]:
        """Sleep up to ``timeout`` seconds. Returns the readable ``fds``, or []
        when the time is up, the loop was poked, or it was stopped."""
        deadline = time.monotonic() + timeout
        selector = self._selector
        for fd in fds:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while not self.stopped:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                if self._external:
                    remaining = min(remaining, STOP_CHECK_INTERVAL)
                events = selector.select(remaining)
                ready = [key.fd for key, _ in events]
                if self._read_fd in ready:
                    self._drain()
                    return []
                if ready:
                    return ready
            return []
        finally:
            for fd in fds:
                selector.unregister(fd)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._selector.close()
            os.close(self._read_fd)
            os.close(self._write_fd)

    def __del__(self) -> None:
        self.close()


@contextmanager
def stop_on_signals(enabled: bool, wakeup: Wakeup) -> Iterator[None]:
    """While in the block, SIGTERM and SIGINT stop ``wakeup`` instead of
    killing the process (main thread only). The first signal puts back the
    previous handlers, so a second one acts as it would have (SIGINT raises
    KeyboardInterrupt, SIGTERM terminates)."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("%s received: finishing the jobs in hand, claiming no more",
                    signal.Signals(signum).name)
        wakeup.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    for sig in (signal.SIGTERM, signal.SIGINT):
        old = signal.signal(sig, on_signal)
        previous[sig] = signal.SIG_DFL if old is None else old
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is on_signal:
                signal.signal(sig, handler)

