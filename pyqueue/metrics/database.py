"""jobq's metrics, read from the database on each scrape.

:class:`DatabaseCollector` is a prometheus-client collector: every scrape
runs ``jobq.metrics()`` and yields its rows as metric families
(``pyqueue.metrics.families``), so every scrape agrees with the database
whichever process serves it. It reads on one connection of its own
(application_name ``pyqueue-metrics``), opened at the first scrape, kept
between scrapes and opened again when it broke.

A slow database does not hang the scrape: connecting waits at most
``timeout`` seconds (libpq's ``connect_timeout``, whole seconds, at least 2)
and the query runs under ``statement_timeout = timeout`` (set for its own
transaction only). A database that cannot be read (down, too slow, jobq
older than 0.5, no privilege) does not fail the scrape with an HTTP 500:
the scrape answers with ``jobq_up 0`` and no ``jobq_*`` series, so the
worker's own metrics still arrive and an alert can fire on ``jobq_up == 0``;
the error is logged (a warning when reading starts failing, then at debug
level until it works again).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from typing import Any

import psycopg

from pyqueue.metrics.families import QUERY, Row, families, up

logger = logging.getLogger("pyqueue.metrics")

SCRAPE_TIMEOUT = 5.0  # seconds a scrape waits for the database: to connect, then for jobq.metrics()
APPLICATION_NAME = "pyqueue-metrics"  # application_name of the collector's connection
SET_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"  # for this transaction only


class DatabaseCollector:
    """Runs ``jobq.metrics()`` on each scrape (thread-safe: one scrape reads
    at a time). ``timeout``: seconds (> 0) a scrape waits for the database."""

    def __init__(self, dsn: str, *, timeout: float = SCRAPE_TIMEOUT) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a connection string (str), got {type(dsn).__name__}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.dsn = dsn
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._failing = False  # the last read failed (logged once)

    def describe(self) -> list[Any]:
        """Nothing: registering the collector does not query the database."""
        return []

    def collect(self) -> Iterator[Any]:
        """The families of ``jobq.metrics()`` and ``jobq_up 1``; only
        ``jobq_up 0`` when the database could not be read."""
        try:
            rows = self.read()
        except psycopg.Error as error:
            text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            logger.log(logging.DEBUG if self._failing else logging.WARNING,
                       "cannot read jobq.metrics() (scrapes report jobq_up 0): %s", text)
            self._failing = True
            yield up(False)
            return
        if self._failing:
            logger.info("reading jobq.metrics() again")
            self._failing = False
        yield from families(rows)
        yield up(True)

    def read(self) -> list[Row]:
        """The rows of ``jobq.metrics()``; psycopg.Error when the database cannot
        be read in time."""
        with self._lock:
            conn = self._conn
            if conn is not None:
                try:
                    return self._query(conn)
                except psycopg.Error:
                    if not conn.broken and not conn.closed:
                        raise  # the query failed (too slow, no function): not worth a new connection
                    self._close()  # it broke since the last scrape: try once on a new one
            self._conn = conn = self._connect()
            try:
                return self._query(conn)
            except psycopg.Error:
                if conn.broken or conn.closed:
                    self._close()
                raise

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True, application_name=APPLICATION_NAME,
                               connect_timeout=max(2, math.ceil(self.timeout)))

    def _query(self, conn: psycopg.Connection[Any]) -> list[Row]:
        with conn.transaction():
            conn.execute(SET_TIMEOUT, (f"{math.ceil(self.timeout * 1000)}ms",))
            return conn.execute(QUERY).fetchall()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close the connection (a later scrape opens a new one)."""
        with self._lock:
            self._close()
