"""``pyqueue demo`` at work: its workers run in threads while the main thread
polls the database for a live progress line and the events of the story."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import psycopg

import pyqueue
from pyqueue.cli.demo_batch import Profile, make_handlers
from pyqueue.cli.demo_story import last_line, wrap
from pyqueue.cli.progress import ProgressLine

POLL_INTERVAL = 0.5  # seconds: the workers' polling fallback, short so retries start on time
TICK = 0.1  # seconds between progress polls (short enough to see every retry's backoff)
TIMEOUT = 150  # seconds: give up waiting for the batch
WORKER_STOP_TIMEOUT = 30  # seconds to wait for each worker to finish after stop()


class DemoError(Exception):
    """The demo could not finish."""


@dataclass
class Counts:
    done: int
    ready: int
    scheduled: int
    running: int
    retrying: int
    dead: int
    cancelled: int

    @property
    def finished(self) -> int:
        return self.done + self.dead + self.cancelled


COUNTS_SQL = """
SELECT count(*) FILTER (WHERE status = 'completed'),
       count(*) FILTER (WHERE status = 'ready' AND attempts = 0),
       count(*) FILTER (WHERE status = 'scheduled' AND attempts = 0),
       count(*) FILTER (WHERE status = 'running'),
       count(*) FILTER (WHERE status IN ('ready', 'scheduled') AND attempts > 0),
       count(*) FILTER (WHERE status = 'dead'),
       count(*) FILTER (WHERE status = 'cancelled')
FROM jobq.jobs
"""

# The jobs of the story. While one waits for its retry, run_at was set by
# jobq.fail() to the failure time plus the backoff, and started_at is when
# the failed attempt began (the demo handlers fail at once): the difference
# is the backoff.
STORY_SQL = """
SELECT id, status, attempts, max_attempts, extract(epoch FROM run_at - started_at)::float8, last_error
FROM jobq.jobs
WHERE id = ANY(%s)
ORDER BY id
"""


# --- running the workers -----------------------------------------------------------

@dataclass
class WorkerThread:
    """A pyqueue.Worker running in a thread (signals stay with the main thread)."""

    worker: pyqueue.Worker
    name: str
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run(handle_signals=False)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def start_workers(dsn: str, profile: Profile) -> list[WorkerThread]:
    handlers = make_handlers(profile)
    threads = []
    for n in range(1, profile.workers + 1):
        worker = pyqueue.Worker(dsn, concurrency=profile.concurrency, batch_size=profile.concurrency,
                                poll_interval=POLL_INTERVAL, name=f"worker-{n}")
        for queue, handler in handlers.items():
            worker.register(queue, handler)
        threads.append(WorkerThread(worker, f"worker-{n}"))
    for thread in threads:
        thread.thread.start()
    return threads


def stop_workers(threads: list[WorkerThread]) -> None:
    for thread in threads:
        thread.worker.stop()
    for thread in threads:
        thread.thread.join(WORKER_STOP_TIMEOUT)


@dataclass
class Watch:
    """Progress counts, and what happens to the jobs of the story: each
    failure with the backoff before its retry (seen while the job waits),
    the dead letter, the success after retries."""

    conn: psycopg.Connection[Any]
    labels: dict[int, str]  # job id -> how the story calls it
    backoffs: dict[int, dict[int, float]] = field(default_factory=dict)  # id -> failed attempt -> seconds
    told: set[tuple[int, str, int]] = field(default_factory=set)  # (id, status, attempts) already told

    def poll(self) -> tuple[Counts, list[str]]:
        """The counts now, and a line for each story event since the last poll."""
        row = self.conn.execute(COUNTS_SQL).fetchone()
        assert row is not None
        events = []
        for job_id, status, attempts, max_attempts, waits, error in self.conn.execute(
            STORY_SQL, (list(self.labels),)
        ).fetchall():
            label = f"{self.labels[job_id]} (job {job_id})"
            waiting = status in ("ready", "scheduled") and attempts > 0  # scheduled, then ready: one event
            event = (job_id, "waiting" if waiting else status, attempts)
            worth_telling = waiting or status == "dead" or (status == "completed" and attempts > 1)
            if not worth_telling or event in self.told:
                continue
            self.told.add(event)
            if waiting:
                self.backoffs.setdefault(job_id, {})[attempts] = waits
                events.append(f"{label}: attempt {attempts}/{max_attempts} failed, retry in {waits:.2f} s: "
                              f"{last_line(error)}")
            elif status == "dead":
                events.append(f"{label}: attempt {attempts}/{max_attempts} failed: dead letter")
            else:
                events.append(f"{label}: succeeded on attempt {attempts}")
        return Counts(*(int(value) for value in row)), events


def progress_text(counts: Counts, total: int, elapsed: float) -> str:
    """The status line; the bar goes last, where a narrow terminal cuts it."""
    width = 20
    filled = round(width * counts.finished / total) if total else width
    return (f"{elapsed:5.1f}s  done {counts.done:>3}/{total}  ready {counts.ready:>3}  "
            f"scheduled {counts.scheduled}  running {counts.running:>2}  retrying {counts.retrying}  "
            f"dead {counts.dead}  [{'#' * filled}{'.' * (width - filled)}]")


def run_until_done(watch: Watch, threads: list[WorkerThread], total: int, out: TextIO) -> float:
    """Show progress until every job finished; the elapsed seconds."""
    progress = ProgressLine(out)
    started = time.monotonic()
    while True:
        counts, events = watch.poll()
        elapsed = time.monotonic() - started
        for event in events:
            progress.note(wrap(event, f"{elapsed:5.1f}s  > ", " " * 10))
        if counts.finished >= total:
            progress.finish(progress_text(counts, total, elapsed))
            return elapsed
        progress.update(progress_text(counts, total, elapsed))
        for thread in threads:
            if not thread.thread.is_alive():
                progress.finish(progress_text(counts, total, elapsed))
                raise DemoError(f"{thread.name} stopped unexpectedly: {thread.error!r}")
        if elapsed > TIMEOUT:
            progress.finish(progress_text(counts, total, elapsed))
            raise DemoError(f"{total - counts.finished} jobs still unfinished after {TIMEOUT} s")
        time.sleep(TICK)
