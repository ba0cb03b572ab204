"""The ``pyqueue`` command line (also ``python -m pyqueue``).

Every subcommand is a ``Command`` (``pyqueue.cli.command``) listed in
``COMMANDS``, defined in the module of its kind: ``install`` (install,
upgrade, version), ``jobs`` (enqueue, stats, retry, cancel, discard-dead),
``worker``, ``demo`` (what ``make demo`` runs), ``dashboard`` (the web UI,
whose extra is imported only when it runs). ``pyqueue bench`` runs
``pyqueue.bench``, imported only when that subcommand is chosen. A new
subcommand is a module defining its ``Command`` plus one line here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import psycopg

from pyqueue import schema
from pyqueue.cli import dashboard, demo, install, jobs, worker
from pyqueue.cli.command import (
    EXIT_FAILED,
    EXIT_REFUSED,
    Command,
    CommandError,
    CommandParser,
    add_dsn_option,
)
from pyqueue.errors import JobqError, missing_jobq, translate_errors

PROG = "pyqueue"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def configure_bench(parser: argparse.ArgumentParser) -> None:
    """The options of ``pyqueue bench``: pyqueue.bench is imported only once
    that subcommand is chosen, so a worker started here never loads it."""
    from pyqueue.bench import suite  # noqa: PLC0415  (only when `pyqueue bench` runs)

    suite.add_arguments(parser)


def run_bench(args: argparse.Namespace) -> int:
    from pyqueue.bench import suite  # noqa: PLC0415  (only when `pyqueue bench` runs)

    return suite.run(args)


BENCH = Command(
    "bench", "measure throughput and pickup latency against the plain-SQL floor",
    "Benchmark jobq on a throwaway local server (default) or on --dsn: the floor (plain batched "
    "INSERT and DELETE ... SKIP LOCKED), jobq through SQL, pyqueue end to end, pickup latency "
    "p50/p95/p99, scaling from 1 to 32 consumers against a naive FOR UPDATE queue, and with "
    "--soak a steady load over minutes. Prints a table, writes JSON and a PNG chart "
    "(bench-results/ by default). Numbers are ratios to the floor measured in the same run.",
    configure_bench, run_bench, dsn_option=False,
)


COMMANDS: list[Command] = [
    install.INSTALL,
    install.UPGRADE,
    jobs.ENQUEUE,
    worker.COMMAND,
    jobs.STATS,
    jobs.RETRY,
    jobs.CANCEL,
    jobs.DISCARD_DEAD,
    demo.COMMAND,
    dashboard.COMMAND,
    BENCH,
    install.VERSION,
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
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=CommandParser)
    for command in COMMANDS:
        # The parser adds the command's own arguments when the command is chosen.
        sub = commands.add_parser(command.name, help=command.help, description=command.description,
                                  configure=command.configure)
        if command.dsn_option:
            add_dsn_option(sub)
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
        if (missing := missing_jobq(exc)) is not None:  # jobq not installed, or older than pyqueue
            report(missing.message, missing.hint)
            return EXIT_REFUSED
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
