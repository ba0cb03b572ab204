"""The cancel watch of the sync ``listen()``: a thread that reads the LISTEN
connection while the loop's own thread runs a handler (or your loop body),
so that ``jobq.cancel()`` of the job in hand reaches it at once
(``job.cancel_requested``, ``job.cancelled_event``) instead of at the next
heartbeat. A ``Worker`` needs none: its loop reads the connection as it
waits for its handler threads.

The watch and the loop share the connection under the consumer's
``listen_lock``; what the watch reads goes through the same
``ConsumerCore.noted``, and a NOTIFY of the queues it reads is handed on to
the loop (``Consumer.noted_by_watch``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from typing import Any, Protocol

import psycopg

logger = logging.getLogger("pyqueue.worker")

RETRY_DELAY = 0.25  # seconds: the LISTEN connection is closed or broken; the loop reopens it
LOOK_AGAIN = 1.0  # seconds: the longest one select waits (the loop may have reopened the connection)


class Consumer(Protocol):
    """What the watch needs of ``pyqueue.worker.sync_consumer.Consumer``."""

    listen_lock: Any  # a threading.RLock

    @property
    def _listen(self) -> psycopg.Connection[Any] | None: ...

    def read_notes(self) -> bool: ...

    def noted_by_watch(self) -> None: ...


class CancelWatch:
    """A daemon thread reading ``consumer``'s LISTEN connection, started by
    :meth:`start` (the connection opened), ended by :meth:`close`."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._read_fd, self._write_fd = os.pipe()  # wakes the select at close

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closing.is_set():
                self._thread = threading.Thread(target=self._run, name="pyqueue-cancel-watch", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        consumer = self.consumer
        while not self._closing.is_set():
            try:
                with consumer.listen_lock:
                    listen = consumer._listen
                    fd = None if listen is None or listen.closed else listen.fileno()
                if fd is None:
                    self._closing.wait(RETRY_DELAY)
                    continue
                ready, _, _ = select.select([fd, self._read_fd], [], [], LOOK_AGAIN)
                if fd in ready and not self._closing.is_set() and consumer.read_notes():
                    consumer.noted_by_watch()
            except psycopg.OperationalError as error:
                # The connection broke under the watch: the loop, asleep on it, would not see it until
                # its next poll. Woken, it reads the broken connection, reopens it and claims at once.
                logger.debug("cancel watch: %s", error)
                consumer.noted_by_watch()
                self._closing.wait(RETRY_DELAY)
            except (OSError, ValueError, psycopg.Error) as error:
                logger.debug("cancel watch: %s", error)  # the loop closed the connection; it reopens it
                self._closing.wait(RETRY_DELAY)

    def close(self) -> None:
        with self._lock:
            self._closing.set()
            thread = self._thread
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")
        if thread is not None:
            thread.join()
        os.close(self._read_fd)
        os.close(self._write_fd)
