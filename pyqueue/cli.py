"""The ``pyqueue`` command line (also ``python -m pyqueue``).

Every subcommand is a ``Command`` listed in ``COMMANDS``; a new one is a
module defining its ``Command`` plus one line here.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from importlib import metadata
from typing import Any

import psycopg

import pyqueue
from pyqueue import bench, defaults, demo, schema
from pyqueue._command import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    Command,
    CommandError,
    add_dsn_option,
    connect,
    connect_dsn,
    resolve_dsn,
)
from pyqueue._table import stats_table
from pyqueue.errors import JobqError, translate_errors

PROG = "pyqueue"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


# --- argument types ------------------------------------------------------------

def seconds(text: str, *, minimum: float = 0.0, inclusive: bool = True) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from exc
    if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds {bound}, got {text!r}")
    return value


def delay_seconds(text: str) -> float:
    return seconds(text)


def positive_seconds(text: str) -> float:
    return seconds(text, inclusive=False)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    return moment if moment.tzinfo else moment.astimezone()


# --- install / upgrade ------------------------------------------------------

def configure_install(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", dest="target", metavar="X.Y.Z",
                        help="install this version instead of the newest packaged one")


def run_install(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        change = schema.install(conn, args.target)
    print(change.describe())
    return EXIT_OK


def configure_upgrade(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", dest="target", metavar="X.Y.Z",
                        help="upgrade to this version instead of the newest packaged one")


def run_upgrade(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        change = schema.upgrade(conn, args.target)
    print(change.describe())
    return EXIT_OK


# --- enqueue ------------------------------------------------------------------

def configure_enqueue(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue", metavar="QUEUE", help="queue name, e.g. emails")
    parser.add_argument("payload", metavar="PAYLOAD_JSON",
                        help='the job\'s payload, a JSON object: \'{"to": "a@b.c"}\'')
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--delay", type=delay_seconds, metavar="SECONDS",
                      help="run no sooner than this many seconds from now")
    when.add_argument("--run-at", type=parse_time, metavar="ISO",
                      help="run no sooner than this time, e.g. 2030-01-31T09:00:00+00:00 "
                      "(without an offset: local time)")
    parser.add_argument("--priority", type=int, default=0, metavar="N",
                        help="lower runs first (default 0, range -32768..32767)")
    parser.add_argument("--max-attempts", type=int, metavar="N",
                        help="attempts before the job is dead-lettered (default: the queue's setting)")
    parser.add_argument("--key", metavar="K",
                        help="unique job key: while a job with this key is active in the queue, "
                        "enqueueing again returns its id and adds nothing")
    parser.add_argument("--timeout", type=positive_seconds, metavar="SECONDS",
                        help="the longest a worker lets the job's handler run before failing it with "
                        "JobTimeout (default: the queue's timeout setting; jobq 0.4)")
    parser.add_argument("--unique-for", type=positive_seconds, metavar="SECONDS",
                        help="with --key: also return the id of a job of that key completed within "
                        "this many seconds, adding nothing (jobq 0.4)")


def run_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise CommandError(f"PAYLOAD_JSON is not valid JSON: {exc}", exit_code=EXIT_REFUSED,
                           hint='Quote it for the shell, e.g. \'{"n": 1}\'.') from exc
    with connect(args) as conn:
        job_id = pyqueue.enqueue(
            conn, args.queue, payload,
            delay=None if args.delay is None else timedelta(seconds=args.delay),
            run_at=args.run_at, priority=args.priority, max_attempts=args.max_attempts, key=args.key,
            timeout=args.timeout, unique_for=args.unique_for,
        )
    print(job_id)
    return EXIT_OK


# --- worker ------------------------------------------------------------------

WORKER_OPTIONS = ("concurrency", "batch_size", "lease", "poll_interval", "name", "shutdown_timeout")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_worker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="MODULE:ATTR",
                        help="a pyqueue.Worker instance (run as configured), or a handler function "
                        "taking a pyqueue.Job, registered for every --queue; MODULE is imported from "
                        "--app-dir (the current directory by default), e.g. myapp.jobs:send_email "
                        "for ./myapp/jobs.py")
    parser.add_argument("--app-dir", default=".", metavar="DIR",
                        help="directory to import MODULE from: put first on sys.path (default: the "
                        "current directory)")
    parser.add_argument("--queue", "-q", dest="queues", action="append", default=[], metavar="Q",
                        help="queue to work on (repeat for several); required with a handler function")
    parser.add_argument("--concurrency", type=positive_int, metavar="N",
                        help=f"jobs handled at once, one thread each (default {defaults.CONCURRENCY})")
    parser.add_argument("--batch-size", type=positive_int, metavar="N",
                        help=f"jobs claimed per round trip (default {defaults.BATCH_SIZE})")
    parser.add_argument("--lease", type=positive_seconds, metavar="SECONDS",
                        help="lease per claimed job (default: the queue's setting)")
    parser.add_argument("--poll-interval", type=positive_seconds, metavar="SECONDS",
                        help="how often to look for jobs when no notification comes "
                        f"(default {defaults.POLL_INTERVAL:g})")
    parser.add_argument("--no-listen", action="store_true",
                        help="poll only, without LISTEN/NOTIFY (e.g. behind PgBouncer in transaction mode)")
    parser.add_argument("--name", metavar="NAME",
                        help="worker name recorded on claimed jobs (default host:pid)")
    parser.add_argument("--shutdown-timeout", type=delay_seconds, metavar="SECONDS",
                        help="after SIGTERM or Ctrl-C, how long running jobs may take to finish; then "
                        "they are failed (the attempt counts), jobs not started are released, and the "
                        f"worker exits (default {defaults.SHUTDOWN_TIMEOUT:g})")
    parser.add_argument("--no-schedules", action="store_true",
                        help="do not run the periodic jobs scheduled for workers (jobq.every with "
                        "runner 'workers'); by default every worker runs them, each tick once")
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS,
                        help="what the worker logs on stderr: a startup line, shutdown and reconnections "
                        "at INFO/WARNING, failed and dead jobs (with their traceback) at ERROR "
                        "(default INFO)")


def load_target(spec: str, app_dir: str = ".") -> object:
    """The object named by MODULE:ATTR (ATTR may be dotted), importing
    MODULE with ``app_dir`` first on sys.path."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"expected MODULE:ATTR, got {spec!r}", exit_code=EXIT_REFUSED,
                           hint="For example: pyqueue worker myapp.tasks:send_email --queue emails")
    directory = os.path.abspath(app_dir)
    if not os.path.isdir(directory):
        raise CommandError(f"--app-dir {app_dir}: no such directory", exit_code=EXIT_REFUSED)
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:
        path = os.path.join(directory, *module_name.split("."))
        raise CommandError(
            f"cannot import {module_name} (looked for {path}.py or {path}/__init__.py, "
            f"and installed packages): {exc}", exit_code=EXIT_REFUSED,
            hint=f"MODULE is imported from {directory} (--app-dir, default the current directory); "
            "run from your project's root or pass --app-dir.") from exc
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise CommandError(f"{module_name} has no attribute {attr}", exit_code=EXIT_REFUSED) from exc
    return found


def run_worker(args: argparse.Namespace) -> int:
    target = load_target(args.target, args.app_dir)
    dsn, source = resolve_dsn(args)
    options: dict[str, Any] = {name: getattr(args, name) for name in WORKER_OPTIONS
                               if getattr(args, name) is not None}
    if args.lease is not None:
        options["lease"] = timedelta(seconds=args.lease)
    if args.no_listen:
        options["use_listen"] = False
    if args.no_schedules:
        options["run_schedules"] = False
    if isinstance(target, pyqueue.Worker):
        if args.queues or options or getattr(args, "dsn", None):
            raise CommandError(
                f"{args.target} is a configured Worker: --queue, --dsn and the worker options apply to "
                "handler functions only", exit_code=EXIT_REFUSED,
                hint="Set them where the Worker is created, or point at a handler function.")
        worker, source = target, f"the Worker {args.target}"
    elif callable(target):
        if not args.queues:
            raise CommandError(f"{args.target} is a handler function: name its queues with --queue",
                               exit_code=EXIT_REFUSED)
        worker = pyqueue.Worker(dsn, **options)
        for queue in args.queues:
            worker.register(queue, target)
    else:
        raise CommandError(f"{args.target} is neither a pyqueue.Worker nor callable", exit_code=EXIT_REFUSED)
    with connect_dsn(worker.dsn, source) as conn:  # fail fast and clearly, before starting threads
        version = schema.installed_version(conn)
        if version is None:
            raise CommandError("jobq is not installed in this database", exit_code=EXIT_REFUSED,
                               hint="Run `pyqueue install` first.")
        info = conn.info
        database = f"host={info.host} port={info.port} dbname={info.dbname} user={info.user}"
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT)
    logging.getLogger("pyqueue.worker").info(
        "pyqueue worker starting: queues %s; concurrency %d; batch size %d; database %s; "
        "jobq %s installed; pyqueue %s", ", ".join(worker.queues), worker.concurrency, worker.batch_size,
        database, version, package_version())
    worker.run(handle_signals=True)
    return EXIT_OK


# --- stats -------------------------------------------------------------------

def configure_stats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print a JSON array (oldest_ready_age in seconds, null when no job is ready) "
                        "instead of a table")


def run_stats(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        stats = pyqueue.stats(conn)
    if args.json:
        print(json.dumps([
            {"queue": s.queue, "ready": s.ready, "scheduled": s.scheduled, "running": s.running,
             "dead": s.dead,
             "oldest_ready_age": None if s.oldest_ready_age is None else s.oldest_ready_age.total_seconds()}
            for s in stats
        ], indent=2))
    else:
        print(stats_table(stats))
    return EXIT_OK


# --- retry / cancel -------------------------------------------------------------

def configure_retry(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", type=int, metavar="ID", help="the job to run again")
    which.add_argument("--dead", metavar="QUEUE", help="run every dead job of QUEUE again")


def run_retry(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        if args.dead is not None:
            count = pyqueue.retry_dead(conn, args.dead)
            print(f"{count} dead job{'s' if count != 1 else ''} of queue {args.dead} will run again")
            return EXIT_OK
        if pyqueue.retry(conn, args.id):
            print(f"job {args.id} will run again")
            return EXIT_OK
    print(f"job {args.id} was not retried: it is running, completed or unknown", file=sys.stderr)
    return EXIT_FAILED


CANCEL_STATUSES = ("ready", "scheduled", "running")


def configure_cancel(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("queue", nargs="?", metavar="QUEUE", help="cancel the live jobs of this queue")
    which.add_argument("--id", type=int, metavar="N", help="cancel this one job instead")
    parser.add_argument("--status", choices=CANCEL_STATUSES,
                        help="only the jobs ready now, scheduled for later, or running (default: all three)")
    parser.add_argument("--where", metavar="JSON",
                        help='only the jobs whose payload contains this JSON object, e.g. \'{"tenant": 7}\'')


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def run_cancel(args: argparse.Namespace) -> int:
    if args.id is not None:
        if args.status is not None or args.where is not None:
            raise CommandError("--status and --where apply to a QUEUE, not to --id", exit_code=EXIT_REFUSED)
        return cancel_one(args)
    if args.queue.isdigit() and args.status is None and args.where is None:
        raise CommandError(f"QUEUE {args.queue!r} looks like a job id", exit_code=EXIT_REFUSED,
                           hint=f"`pyqueue cancel --id {args.queue}` cancels that job. To cancel every live "
                           f"job of a queue named {args.queue}, add --where '{{}}'.")
    where = None if args.where is None else json_object("--where", args.where)
    with connect(args) as conn:
        count = pyqueue.cancel_jobs(conn, args.queue, status=args.status, payload_contains=where)
    which = "" if args.status is None else f"{args.status} "
    print(f"{plural(count, which + 'job')} of queue {args.queue} cancelled")
    return EXIT_OK


def cancel_one(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        cancelled = pyqueue.cancel(conn, args.id)
    if cancelled:
        print(f"job {args.id} cancelled")
        return EXIT_OK
    print(f"job {args.id} was not cancelled: it is finished or unknown", file=sys.stderr)
    return EXIT_FAILED


def json_object(option: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option} is not valid JSON: {exc}", exit_code=EXIT_REFUSED,
                           hint='Quote it for the shell, e.g. \'{"tenant": 7}\'.') from exc


def configure_discard_dead(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue", metavar="QUEUE", help="the queue whose dead jobs go")
    parser.add_argument("--older-than", type=delay_seconds, metavar="SECONDS",
                        help="only the jobs dead for longer than this (default: every dead job)")


def run_discard_dead(args: argparse.Namespace) -> int:
    older_than = None if args.older_than is None else timedelta(seconds=args.older_than)
    with connect(args) as conn:
        count = pyqueue.discard_dead(conn, args.queue, older_than=older_than)
    print(f"{plural(count, 'dead job')} of queue {args.queue} discarded")
    return EXIT_OK


# --- version -------------------------------------------------------------------

def configure_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--installed", action="store_true",
                        help="also connect and show the jobq version installed in the database")


def package_version() -> str:
    try:
        return metadata.version("pyqueue")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def run_version(args: argparse.Namespace) -> int:
    print(f"pyqueue {package_version()}")
    print(f"jobq SQL {schema.packaged_version()} (packaged)")
    if args.installed:
        with connect(args) as conn:
            found = schema.installed(conn)
        if found is None:
            print("jobq in database: not installed")
        else:
            print(f"jobq in database: {found.version}{' (extension)' if found.extension else ''}")
    return EXIT_OK


COMMANDS: list[Command] = [
    Command("install", "install jobq into a database (or bring it to the packaged version)",
            "Install the jobq schema with the SQL scripts shipped in pyqueue: no superuser and no server "
            "files needed (managed Postgres). Applies the newest full install script up to the target "
            "version, then the upgrade scripts, in one transaction. Already at the target: does nothing. "
            "Installed but older: upgrades. Never downgrades.",
            configure_install, run_install),
    Command("upgrade", "upgrade an installed jobq",
            "Apply the jobq upgrade scripts in order, in one transaction, up to the packaged version "
            "(or --to). When jobq was installed with CREATE EXTENSION, runs ALTER EXTENSION jobq UPDATE "
            "instead. Never downgrades.",
            configure_upgrade, run_upgrade),
    Command("enqueue", "add a job and print its id",
            "Add one job to QUEUE and print its id. With --key, an active job holding the same key "
            "is returned instead of adding a second one (with --unique-for, also one completed that "
            "recently).",
            configure_enqueue, run_enqueue),
    Command("worker", "run a worker until SIGTERM or Ctrl-C",
            "Run jobs with a handler: MODULE:ATTR names either a pyqueue.Worker instance, run as "
            "configured, or a function taking a pyqueue.Job, registered for every --queue. A handler "
            "that returns completes its job; one that raises fails it (retried with backoff, then "
            "dead-lettered). It logs a startup line (queues, settings, database, versions) and a line "
            "per job that goes dead. SIGTERM or Ctrl-C stops claiming, lets running jobs finish for up to "
            "--shutdown-timeout seconds (then fails them), releases the jobs not started and exits 0. "
            "Workers also run the periodic jobs scheduled with runner 'workers' (jobq 0.4).",
            configure_worker, run_worker),
    Command("stats", "show per-queue counts: ready, scheduled, running, dead",
            "Show jobq.stats: per queue, jobs ready now, scheduled for later, running, dead "
            "(out of attempts), and the age of the oldest ready job.",
            configure_stats, run_stats),
    Command("retry", "run a dead, cancelled or waiting job again (or every dead job of a queue)",
            "Run a job again now: a dead or cancelled job gets a fresh attempt budget, a scheduled or "
            "backing-off job runs now. --dead QUEUE brings back every dead job of QUEUE. "
            "Exit 1 when the job is running, completed or unknown.",
            configure_retry, run_retry),
    Command("cancel", "cancel the live jobs of a queue (or one job with --id) and print how many",
            "Cancel the live jobs of QUEUE: all of them, or only those --status ready, scheduled or "
            "running, and only those whose payload contains the --where JSON object. Prints how many. "
            "Workers holding a cancelled job lose its lease. --id N cancels one job instead (exit 1 when "
            "it is already finished or unknown). Needs jobq 0.4 for QUEUE.",
            configure_cancel, run_cancel),
    Command("discard-dead", "delete the dead jobs of a queue and print how many",
            "Delete the dead jobs of QUEUE for good (they can no longer be retried), or only those dead "
            "for longer than --older-than SECONDS. Prints how many. Needs jobq 0.4.",
            configure_discard_dead, run_discard_dead),
    demo.COMMAND,
    Command("bench", "measure throughput and pickup latency against the plain-SQL floor",
            "Benchmark jobq on a throwaway local server (default) or on --dsn: the floor (plain batched "
            "INSERT and DELETE ... SKIP LOCKED), jobq through SQL, pyqueue end to end, pickup latency "
            "p50/p95/p99, scaling from 1 to 32 consumers against a naive FOR UPDATE queue, and with "
            "--soak a steady load over minutes. Prints a table, writes JSON and a PNG chart "
            "(bench-results/ by default). Numbers are ratios to the floor measured in the same run.",
            bench.add_arguments, bench.run, dsn_option=False),
    Command("version", "show the pyqueue and jobq versions",
            "Show the pyqueue package version and the jobq SQL version it ships; with --installed, "
            "also the version installed in the database.",
            configure_version, run_version),
]

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="jobq, the job queue inside PostgreSQL: install it, enqueue jobs, run workers, "
        "inspect queues. The database comes from --dsn, else $DATABASE_URL, else the libpq "
        "PG* environment variables.",
        epilog="Exit codes: 0 done; 1 failed (no connection, database error, nothing to act on); "
        "2 refused (bad arguments, a jobq error, an impossible install or upgrade). "
        f"`{PROG} COMMAND --help` explains each command.",
    )
    add_dsn_option(parser, top_level=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.description)
        if command.dsn_option:
            add_dsn_option(sub)
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def report(message: str, hint: str | None, detail: str | None = None) -> None:
    print(f"error: {message}", file=sys.stderr)
    if detail:
        print(f"detail: {detail}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)


def report_failure(exc: Exception) -> int:
    """Tell the user what went wrong; the exit code."""
    if isinstance(exc, JobqError):
        report(exc.message, exc.hint, exc.detail)
        return EXIT_REFUSED
    if isinstance(exc, schema.SchemaError | CommandError):
        report(str(exc), exc.hint)
        return exc.exit_code if isinstance(exc, CommandError) else EXIT_REFUSED
    if isinstance(exc, psycopg.OperationalError):
        report(f"database connection failed: {str(exc).strip()}", None)
        return EXIT_FAILED
    if isinstance(exc, psycopg.Error):
        report(f"database error: {str(exc).strip()}", exc.diag.message_hint)
        return EXIT_FAILED
    raise exc


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with translate_errors():
            code: int = args.run(args)
    except (JobqError, schema.SchemaError, CommandError, psycopg.Error) as exc:
        return report_failure(exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code
