"""Helpers for the coordination tests (tests/test_coordination.py,
tests/test_periodic.py): typed one-liners over psycopg, running callables in
threads that each hold their own database session, and the interval
arithmetic the assertions use (maximum overlap, sliding windows)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

Row = tuple[Any, ...]
Conn = psycopg.Connection[Row]

WAIT_TIMEOUT = 60.0  # seconds: generous upper bound for anything a test waits for
IDLE_PAUSE = 0.005  # seconds a claimer sleeps after a claim that returned nothing


def scalar(conn: Conn, sql: str, params: Sequence[object] | None = None) -> Any:
    """The single value of a one-row, one-column query."""
    row = conn.execute(sql, params).fetchone()
    assert row is not None, f"no row from {sql!r}"
    return row[0]


def db_now(conn: Conn) -> datetime:
    """The database clock (clock_timestamp()), the one clock all records use."""
    value = scalar(conn, "SELECT clock_timestamp()")
    assert isinstance(value, datetime)
    return value


def enqueue(
    conn: Conn, queue: str, payload: dict[str, object], *, group_key: str | None = None,
    max_attempts: int | None = None,
) -> int:
    """jobq.enqueue(); returns the job id."""
    value = scalar(
        conn,
        "SELECT jobq.enqueue(%s, %s, max_attempts => %s, group_key => %s)",
        (queue, Jsonb(payload), max_attempts, group_key),
    )
    return int(value)


def enqueue_many(conn: Conn, queue: str, count: int) -> list[int]:
    """jobq.enqueue_many() of ``count`` payloads {"i": 1..count}; returns the ids."""
    rows = conn.execute(
        "SELECT jobq.enqueue_many(%s, array_agg(jsonb_build_object('i', g) ORDER BY g)) "
        "FROM generate_series(1, %s) AS g",
        (queue, count),
    ).fetchall()
    return [int(r[0]) for r in rows]


def count_live(conn: Conn, queue: str) -> int:
    """Jobs of a queue still in the live table (ready, scheduled or running)."""
    return int(scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = %s", (queue,)))


class Threads:
    """Run callables in threads; re-raise the first failure in the caller.

    Each callable gets the shared ``stop`` event (set when any thread fails)
    and should return soon after it is set. ``join`` waits at most
    ``timeout`` seconds overall.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def start(self, name: str, target: Callable[..., None], *args: object) -> None:
        """Run ``target(stop, *args)`` in a new thread."""

        def run() -> None:
            try:
                target(self.stop, *args)
            except BaseException as exc:
                with self._lock:
                    self._errors.append(exc)
                self.stop.set()

        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def join(self, timeout: float = WAIT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        self.stop.set()
        if self._errors:
            raise self._errors[0]
        assert not alive, f"threads still running after {timeout} s: {alive}"


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT_TIMEOUT,
               pause: float = 0.05) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(pause)


def max_overlap(intervals: Iterable[tuple[datetime, datetime]]) -> int:
    """The largest number of intervals [start, end) that overlap at one instant."""
    events: list[tuple[datetime, int]] = []
    for start, end in intervals:
        assert start <= end, f"interval ends before it starts: {start} > {end}"
        events.append((start, 1))
        events.append((end, -1))
    # At equal times, ends (-1) sort before starts (+1): touching is not overlapping.
    events.sort()
    current = best = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


def max_in_window(times: Sequence[datetime], width: timedelta) -> tuple[int, datetime | None]:
    """The most ``times`` inside any window [t, t + width) starting at one of them,
    and where that window starts."""
    ordered = sorted(times)
    best, where, j = 0, None, 0
    for i, start in enumerate(ordered):
        j = max(j, i)
        while j < len(ordered) and ordered[j] < start + width:
            j += 1
        if j - i > best:
            best, where = j - i, start
    return best, where
