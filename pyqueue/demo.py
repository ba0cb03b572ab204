"""``pyqueue demo`` — what ``make demo`` runs.

Starts a throwaway PostgreSQL (pg_cron loaded when the machine has it),
installs jobq, enqueues a realistic mixed batch on three queues, and runs
several workers with a live progress line. Along the way: urgent jobs jump
the queue, a delayed job waits for its time, a flaky job fails twice and
then succeeds, and a poison job uses up its attempts and lands in the dead
letter. Then it tells what happened (from the database), prints jobq.stats,
stops the server and removes its directory — also on Ctrl-C or an error.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import psycopg

import pyqueue
from pyqueue import schema
from pyqueue._command import EXIT_FAILED, EXIT_OK, Command
from pyqueue._progress import ProgressLine
from pyqueue._table import stats_table
from pyqueue.localserver import LocalServer, temporary_directory

QUEUES = ("emails", "thumbnails", "invoices")
HISTORY = 3600  # seconds the demo's completed jobs stay in jobq.jobs (history is opt-in)
BACKOFF_BASE = 0.5  # seconds: first retry delay on the demo queues
BACKOFF_CAP = 2.0  # seconds: longest retry delay on the demo queues
BACKOFF_JITTER = 0.25  # fraction: delays are scaled by a random factor in [0.75, 1]
POISON_MAX_ATTEMPTS = 3  # attempts before the poison invoice is dead-lettered
URGENT_PRIORITY = -10  # password resets: lower numbers run first
STORY_PRIORITY = -5  # the delayed, flaky and poison jobs: run when due, not behind the backlog
WORK = {"emails": (0.1, 0.3), "thumbnails": (0.3, 0.8), "invoices": (0.2, 0.5)}  # seconds of simulated work
POLL_INTERVAL = 0.5  # seconds: the workers' polling fallback, short so retries start on time
TICK = 0.1  # seconds between progress polls (short enough to see every retry's backoff)
TIMEOUT = 150  # seconds: give up waiting for the batch
WORKER_STOP_TIMEOUT = 30  # seconds to wait for each worker to finish after stop()
CURRENCIES = ("EUR", "USD", "GBP")
TEXT_WIDTH = 100  # characters per line of the story, at most (narrower terminals: their width)


@dataclass(frozen=True)
class Profile:
    """How big the demo is."""

    newsletters: int  # ordinary emails, priority 0
    password_resets: int  # urgent emails, enqueued last
    thumbnails: int
    invoices: int
    work_scale: float  # multiplies WORK
    delay: float  # seconds before the month-end report may run
    workers: int
    concurrency: int  # handler threads per worker

    @property
    def total(self) -> int:
        # + the flaky email, the poison invoice and the delayed report
        return self.newsletters + self.password_resets + self.thumbnails + self.invoices + 3


FULL = Profile(newsletters=200, password_resets=5, thumbnails=150, invoices=100, work_scale=1.0, delay=8.0,
               workers=3, concurrency=2)
SMALL = Profile(newsletters=20, password_resets=3, thumbnails=10, invoices=8, work_scale=0.1, delay=2.0,
                workers=2, concurrency=2)


class DemoError(Exception):
    """The demo could not finish."""


@dataclass
class Specials:
    """The ids of the jobs the story is about."""

    flaky: int
    poison: int
    report: int


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


# --- the handlers: what the workers do ---------------------------------------

class SmtpTemporaryError(Exception):
    """An SMTP 4xx answer: try again later."""


def simulate(queue: str, scale: float) -> None:
    low, high = WORK[queue]
    time.sleep(random.uniform(low, high) * scale)


def make_handlers(profile: Profile) -> dict[str, Callable[[pyqueue.Job], None]]:
    """One handler per queue; each does a little simulated work."""

    def send_email(job: pyqueue.Job) -> None:
        if job.payload.get("smtp") == "busy" and job.attempts <= 2:
            raise SmtpTemporaryError("421 4.7.0 mx.example.com busy, try again later")
        simulate("emails", profile.work_scale)

    def make_thumbnail(job: pyqueue.Job) -> None:
        simulate("thumbnails", profile.work_scale)

    def render_invoice(job: pyqueue.Job) -> None:
        currency = job.payload.get("currency", "EUR")
        if currency not in CURRENCIES:
            raise ValueError(f"invoice {job.payload.get('invoice')}: unsupported currency {currency!r}")
        simulate("invoices", profile.work_scale)

    return {"emails": send_email, "thumbnails": make_thumbnail, "invoices": render_invoice}


# --- setting the scene ---------------------------------------------------------

def configure_queues(conn: psycopg.Connection[Any]) -> None:
    """Quick retries, and an hour of history: the story told at the end is
    read from the completed jobs, which jobq keeps only when asked."""
    for queue in QUEUES:
        pyqueue.configure_queue(conn, queue, backoff_base=timedelta(seconds=BACKOFF_BASE),
                                backoff_cap=timedelta(seconds=BACKOFF_CAP), backoff_jitter=BACKOFF_JITTER,
                                retention=timedelta(seconds=HISTORY))


def enqueue_batch(conn: psycopg.Connection[Any], profile: Profile) -> Specials:
    """The whole batch, in one transaction: it appears to the workers at once."""
    rng = random.Random(42)
    with conn.transaction():
        pyqueue.enqueue_many(conn, "emails", [
            {"to": f"reader{n}@example.com", "template": "newsletter"} for n in range(profile.newsletters)])
        pyqueue.enqueue_many(conn, "thumbnails", [
            {"image": f"uploads/IMG_{4000 + n}.jpg", "size": rng.choice(["128x128", "512x512"])}
            for n in range(profile.thumbnails)])
        pyqueue.enqueue_many(conn, "invoices", [
            {"invoice": 2000 + n, "customer": f"customer-{rng.randint(1, 60)}",
             "currency": rng.choice(CURRENCIES), "amount": round(rng.uniform(20, 2000), 2)}
            for n in range(profile.invoices)])
        flaky = pyqueue.enqueue(conn, "emails", {"to": "ops@example.com", "template": "weekly-report",
                                                 "smtp": "busy"}, priority=STORY_PRIORITY)
        poison = pyqueue.enqueue(conn, "invoices", {"invoice": 1042, "customer": "globex", "currency": "XXX",
                                                    "amount": 99.5}, max_attempts=POISON_MAX_ATTEMPTS,
                                 priority=STORY_PRIORITY)
        report = pyqueue.enqueue(conn, "invoices", {"report": "month-end", "month": "2026-11"},
                                 delay=timedelta(seconds=profile.delay), priority=STORY_PRIORITY)
        pyqueue.enqueue_many(conn, "emails", [
            {"to": f"user{n}@example.com", "template": "password-reset"}
            for n in range(profile.password_resets)],
            priority=URGENT_PRIORITY)
    return Specials(flaky=flaky, poison=poison, report=report)


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


# --- telling what happened ------------------------------------------------------

def wrap(text: str, first: str, rest: str) -> str:
    """text wrapped to the terminal (at most TEXT_WIDTH columns)."""
    width = min(TEXT_WIDTH, shutil.get_terminal_size((TEXT_WIDTH, 24)).columns - 1)
    return textwrap.fill(text, width=width, initial_indent=first, subsequent_indent=rest)


def last_line(error: str | None) -> str:
    """The exception line of a traceback, without the exception's module."""
    lines = [line.strip() for line in (error or "").strip().splitlines() if line.strip()]
    if not lines:
        return "(no error recorded)"
    name, colon, message = lines[-1].partition(":")
    return f"{name.rsplit('.', 1)[-1]}{colon}{message}" if " " not in name else lines[-1]


def seconds_list(backoffs: dict[int, float]) -> str:
    return ", then ".join(f"{backoffs[attempt]:.2f} s" for attempt in sorted(backoffs))


def narrative(conn: psycopg.Connection[Any], profile: Profile, specials: Specials,
              backoffs: dict[int, dict[int, float]]) -> list[str]:
    lines = []
    per_worker = conn.execute(
        "SELECT coalesce(worker, '?'), count(*) FROM jobq.jobs WHERE status = 'completed' "
        "GROUP BY 1 ORDER BY 1").fetchall()
    lines.append("shared work: " + ", ".join(f"{name} completed {count}" for name, count in per_worker))

    waits = dict(conn.execute(
        "SELECT priority, avg(extract(epoch FROM started_at - created_at))::float8 FROM jobq.jobs "
        "WHERE queue = 'emails' AND status = 'completed' AND attempts = 1 GROUP BY priority").fetchall())
    if URGENT_PRIORITY in waits and 0 in waits:
        lines.append(
            f"priority: {profile.password_resets} password-reset emails (priority {URGENT_PRIORITY}) were "
            f"enqueued after {profile.newsletters} newsletters yet started "
            f"{waits[URGENT_PRIORITY]:.2f} s after enqueue on average; newsletters waited {waits[0]:.2f} s")

    row = conn.execute("SELECT extract(epoch FROM started_at - created_at)::float8 FROM jobq.jobs "
                       "WHERE id = %s", (specials.report,)).fetchone()
    if row is not None and row[0] is not None:
        lines.append(f"scheduled: the month-end report (job {specials.report}), delayed by "
                     f"{profile.delay:g} s at enqueue, started {row[0]:.2f} s after it was enqueued")

    policy = (f"backoff base {BACKOFF_BASE:g} s doubling per attempt, cap {BACKOFF_CAP:g} s, "
              f"jitter {BACKOFF_JITTER:g}")
    flaky = conn.execute("SELECT status, attempts, last_error FROM jobq.jobs WHERE id = %s",
                         (specials.flaky,)).fetchone()
    if flaky is not None:
        status, attempts, error = flaky
        waited = backoffs.get(specials.flaky, {})
        outcome = f"and completed on attempt {attempts}" if status == "completed" else f"and is {status}"
        lines.append(f"retry: the weekly report email (job {specials.flaky}) failed {attempts - 1} times "
                     f"({last_line(error)}), was retried after {seconds_list(waited) or '?'} ({policy}), "
                     f"{outcome}")
    poison = conn.execute("SELECT status, attempts, max_attempts, last_error FROM jobq.jobs WHERE id = %s",
                          (specials.poison,)).fetchone()
    if poison is not None:
        status, attempts, max_attempts, error = poison
        waited = backoffs.get(specials.poison, {})
        lines.append(f"dead letter: invoice 1042 (job {specials.poison}) failed {attempts} of {max_attempts} "
                     f"attempts, retried after {seconds_list(waited) or '?'}, and is {status} with its "
                     f"payload kept; last error: {last_line(error)}; `pyqueue retry {specials.poison}` "
                     "would run it again")
    return lines


# --- the whole show ----------------------------------------------------------------------

@contextmanager
def quiet_job_failures() -> Iterator[None]:
    """The demo's failures are on purpose and told in the story: keep their
    tracebacks (logged by pyqueue.job) off the screen. Other warnings show."""
    logger = logging.getLogger("pyqueue.job")
    previous = logger.propagate
    handler = logging.NullHandler()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = previous


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the server is still stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def shut_down(server: LocalServer, out: TextIO) -> None:
    """Stop the server and remove its directory (kept, with a warning, if
    the server cannot be stopped)."""
    try:
        server.stop()
    except RuntimeError as exc:
        # Ctrl-C reaches the server too (same process group) and may have
        # shut it down already; give it a moment.
        for _ in range(100):
            if not (server.datadir / "postmaster.pid").exists():
                break
            time.sleep(0.1)
        else:
            print(f"warning: could not stop the server in {server.directory}: {exc}", file=sys.stderr)
            return
    shutil.rmtree(server.directory, ignore_errors=True)
    print(f"stopped PostgreSQL and removed {server.directory}", file=out)


def play(server: LocalServer, profile: Profile, out: TextIO) -> None:
    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        say(schema.install(conn).describe())
        if server.pg_cron:
            conn.execute("SELECT * FROM jobq.schedule_maintenance()")
            say("pg_cron: jobq.reap() scheduled every minute, jobq.prune() every 5 minutes")
        configure_queues(conn)
        specials = enqueue_batch(conn, profile)
        say(f"enqueued {profile.total} jobs in one transaction, on {', '.join(QUEUES)}:")
        for line in (
            f"{profile.newsletters} newsletters, {profile.thumbnails} thumbnails, "
            f"{profile.invoices} invoices (priority 0, a little simulated work each)",
            f"{profile.password_resets} password resets (priority {URGENT_PRIORITY}), enqueued last",
            f"priority {STORY_PRIORITY}: a month-end report delayed {profile.delay:g} s, an email whose SMTP "
            f"server is busy twice, an invoice in an unknown currency (max {POISON_MAX_ATTEMPTS} attempts)",
            f"queues retry after {BACKOFF_BASE:g} s, doubling up to {BACKOFF_CAP:g} s, "
            f"jitter {BACKOFF_JITTER:g}",
        ):
            say(wrap(line, "  - ", "    "))
        say(f"starting {profile.workers} workers x {profile.concurrency} threads (LISTEN/NOTIFY, "
            f"polling every {POLL_INTERVAL:g} s as a fallback)")
        say()
        watch = Watch(conn, {specials.flaky: "weekly report email", specials.poison: "invoice 1042"})
        threads = start_workers(server.dsn, profile)
        try:
            elapsed = run_until_done(watch, threads, profile.total, out)
        finally:
            stop_workers(threads)
        say()
        say(f"What happened ({elapsed:.1f} s):")
        for line in narrative(conn, profile, specials, watch.backoffs):
            say(wrap(line, "  - ", "    "))
        say()
        say("jobq.stats:")
        say(stats_table(pyqueue.stats(conn)))
        say()


def run_demo(profile: Profile, out: TextIO = sys.stdout) -> int:
    directory = temporary_directory("jobq-demo-")
    server = LocalServer(Path(directory), database="jobq")
    cron = "pg_cron loaded" if server.pg_cron else "pg_cron not installed: maintenance by the workers"
    print(f"starting a throwaway PostgreSQL in {directory} ({cron})", file=out, flush=True)
    try:
        with sigterm_as_interrupt(), quiet_job_failures():
            try:
                server.start()
                play(server, profile, out)
            finally:
                shut_down(server, out)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--small", "--quick", action="store_true",
                        help=f"a quick run: {SMALL.total} jobs instead of {FULL.total}")


def run(args: argparse.Namespace) -> int:
    return run_demo(SMALL if args.small else FULL)


COMMAND = Command(
    "demo", "watch jobq work: a throwaway server, a realistic batch, retries, a dead letter",
    "Start a throwaway local PostgreSQL (pg_cron loaded when available), install jobq, enqueue a "
    "realistic batch on three queues and run several workers with a live progress line: urgent jobs "
    "first, a delayed job, a job that fails twice then succeeds, and one that ends in the dead letter. "
    "Then tell what happened, print jobq.stats, stop the server and remove its files. Needs the "
    "PostgreSQL server binaries (initdb, pg_ctl); as root, the server runs as the postgres user.",
    configure, run, dsn_option=False,
)
