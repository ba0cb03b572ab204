"""The subcommands on jobs and queues: ``enqueue``, ``stats``, ``retry``,
``cancel`` and ``discard-dead``."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from typing import Any

import psycopg

import pyqueue
from pyqueue.cli.arguments import delay_seconds, parse_time, positive_seconds
from pyqueue.cli.command import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, Command, CommandError, connect
from pyqueue.cli.table import stats_table
from pyqueue.worker.startup import SHOWN_QUEUES


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
    parser.add_argument("--on-duplicate", choices=("keep", "replace", "replace_payload"), default="keep",
                        help="with --key, when a job holds the key: keep it (default), replace its payload, "
                        "run time and priority (debounce), or only its payload (throttle); a running job "
                        "is never changed, a new job takes the key (jobq 0.12)")


JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
              type(None): "null"}


def run_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise CommandError(f"PAYLOAD_JSON is not valid JSON: {exc}", exit_code=EXIT_REFUSED,
                           hint='Quote it for the shell, e.g. \'{"n": 1}\'.') from exc
    if not isinstance(payload, dict):
        kind = JSON_KINDS.get(type(payload), type(payload).__name__)
        raise CommandError(f"PAYLOAD_JSON must be a JSON object, got {kind}: {args.payload}",
                           exit_code=EXIT_REFUSED,
                           hint=f"Put it under a key, e.g. '{json.dumps({'items': payload})}'.")
    with connect(args) as conn:
        job_id = pyqueue.enqueue(
            conn, args.queue, payload,
            delay=None if args.delay is None else timedelta(seconds=args.delay),
            run_at=args.run_at, priority=args.priority, max_attempts=args.max_attempts, key=args.key,
            timeout=args.timeout, unique_for=args.unique_for, on_duplicate=args.on_duplicate,
        )
    print(job_id)
    return EXIT_OK


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
             "dead": s.dead, "waiting": s.waiting,
             "oldest_ready_age": None if s.oldest_ready_age is None else s.oldest_ready_age.total_seconds()}
            for s in stats
        ], indent=2))
    else:
        print(stats_table(stats))
    return EXIT_OK


def configure_retry(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", type=int, metavar="ID", help="the job to run again")
    which.add_argument("--dead", metavar="QUEUE", help="run every dead job of QUEUE again")


def unknown_queue(conn: psycopg.Connection[Any], queue: str) -> bool:
    """Whether jobq has never seen ``queue`` (no job, setting or count: a
    typo?); if so, a warning listing the queues it knows."""
    try:
        known = [row[0] for row in conn.execute("SELECT s.queue FROM jobq.stats AS s ORDER BY s.queue")]
    except psycopg.Error:  # e.g. a role that may not read jobq.stats: nothing to say
        return False
    if queue in known:
        return False
    shown = ", ".join(known[:SHOWN_QUEUES]) + (", ..." if len(known) > SHOWN_QUEUES else "")
    print(f"warning: jobq has never seen queue {queue!r} (no job, setting or count): a typo? "
          f"Known queues: {shown or 'none yet'}", file=sys.stderr)
    return True


def acted_on(conn: psycopg.Connection[Any], queue: str, count: int) -> int:
    """The exit code after ``count`` jobs of ``queue`` were acted on: 0, also
    for none in a queue jobq knows; 1 for a queue it has never seen."""
    return EXIT_FAILED if count == 0 and unknown_queue(conn, queue) else EXIT_OK


def run_retry(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        if args.dead is not None:
            count = pyqueue.retry_dead(conn, args.dead)
            print(f"{count} dead job{'s' if count != 1 else ''} of queue {args.dead} will run again")
            return acted_on(conn, args.dead, count)
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
        return acted_on(conn, args.queue, count)


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
        return acted_on(conn, args.queue, count)


ENQUEUE = Command(
    "enqueue", "add a job and print its id",
    "Add one job to QUEUE and print its id. With --key, an active job holding the same key "
    "is returned instead of adding a second one (with --unique-for, also one completed that "
    "recently).",
    configure_enqueue, run_enqueue,
)

STATS = Command(
    "stats", "show per-queue counts: ready, scheduled, running, dead",
    "Show jobq.stats: per queue, jobs ready now, scheduled for later, running, dead "
    "(out of attempts), and the age of the oldest ready job.",
    configure_stats, run_stats,
)

RETRY = Command(
    "retry", "run a dead, cancelled or waiting job again (or every dead job of a queue)",
    "Run a job again now: a dead or cancelled job gets a fresh attempt budget, a scheduled or "
    "backing-off job runs now. --dead QUEUE brings back every dead job of QUEUE. "
    "Exit 1 when the job is running, completed or unknown, or when QUEUE is one jobq has never "
    "seen (a warning lists the known queues).",
    configure_retry, run_retry,
)

CANCEL = Command(
    "cancel", "cancel the live jobs of a queue (or one job with --id) and print how many",
    "Cancel the live jobs of QUEUE: all of them, or only those --status ready, scheduled or "
    "running, and only those whose payload contains the --where JSON object. Prints how many. "
    "Workers holding a cancelled job lose its lease. --id N cancels one job instead (exit 1 when "
    "it is already finished or unknown). A QUEUE jobq has never seen: a warning listing the "
    "known queues, exit 1. Needs jobq 0.4 for QUEUE.",
    configure_cancel, run_cancel,
)

DISCARD_DEAD = Command(
    "discard-dead", "delete the dead jobs of a queue and print how many",
    "Delete the dead jobs of QUEUE for good (they can no longer be retried), or only those dead "
    "for longer than --older-than SECONDS. Prints how many. A QUEUE jobq has never seen: a "
    "warning listing the known queues, exit 1. Needs jobq 0.4.",
    configure_discard_dead, run_discard_dead,
)
