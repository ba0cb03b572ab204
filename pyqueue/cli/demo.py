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
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TextIO

import psycopg

import pyqueue
from pyqueue import schema
from pyqueue.cli.command import EXIT_FAILED, EXIT_OK, Command
from pyqueue.cli.demo_batch import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    BACKOFF_JITTER,
    FULL,
    POISON_MAX_ATTEMPTS,
    QUEUES,
    SMALL,
    STORY_PRIORITY,
    URGENT_PRIORITY,
    Profile,
    configure_queues,
    enqueue_batch,
)
from pyqueue.cli.demo_story import narrative, wrap
from pyqueue.cli.demo_watch import (
    POLL_INTERVAL,
    DemoError,
    Watch,
    run_until_done,
    start_workers,
    stop_workers,
)
from pyqueue.cli.table import stats_table
from pyqueue.localserver import LocalServer, temporary_directory


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
