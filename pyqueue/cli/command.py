"""What a ``pyqueue`` subcommand is, and what subcommands share: where the
database connection comes from and how failures are reported.

A subcommand module defines its ``Command`` and ``pyqueue.cli`` lists it.
Exit codes: 0 done, 1 failed (no connection, database error, nothing to act
on), 2 refused (bad arguments, a jobq error such as an invalid queue name,
an impossible install or upgrade).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
DSN_ORDER = ("host", "hostaddr", "port", "dbname", "user")  # how messages show a DSN
CONNECT_TIMEOUT = 10  # seconds, unless the DSN or PGCONNECT_TIMEOUT says otherwise
# What to do when the connection fails, by where its DSN came from (resolve_dsn).
CONNECT_HINTS = {
    "--dsn": "Check the --dsn value: host (or socket directory), port, dbname, user; is the server running?",
    "DATABASE_URL": "Check $DATABASE_URL (or pass --dsn): host, port, database, user; is the server running?",
    "": "Pass --dsn, or set DATABASE_URL or PGHOST/PGPORT/PGDATABASE/PGUSER.",
}


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one-line help, a longer description, a
    function adding its arguments, and a function running it (-> exit code).
    ``dsn_option``: the CLI adds the shared ``--dsn`` option (commands that
    start their own server, or define ``--dsn`` themselves, say False)."""

    name: str
    help: str
    description: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    dsn_option: bool = True


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser, given its arguments only when that subcommand
    is chosen (or its help shown): building the command line imports none of
    the other subcommands' machinery (``pyqueue worker`` never loads the
    benchmarks)."""

    def __init__(self, *args: Any, configure: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._configure = configure

    def _configured(self) -> None:
        if self._configure is not None:
            configure, self._configure = self._configure, None
            configure(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._configured()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._configured()
        return super().format_usage()

    def format_help(self) -> str:
        self._configured()
        return super().format_help()


class CommandError(Exception):
    """A failure to report as ``error: …`` (and ``hint: …``) with an exit code."""

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.hint = hint
        self.exit_code = exit_code


def add_dsn_option(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """``--dsn``, accepted before or after the subcommand name."""
    parser.add_argument(
        "--dsn",
        # Only the top level sets a default, so a subcommand does not
        # overwrite a --dsn given before it.
        default=None if top_level else argparse.SUPPRESS,
        metavar="DSN",
        help="libpq connection string or URI (default: $DATABASE_URL, else the PG* environment "
        "variables such as PGHOST, PGDATABASE, PGUSER)",
    )


def resolve_dsn(args: argparse.Namespace) -> tuple[str, str]:
    """The connection string to use and where it came from."""
    if getattr(args, "dsn", None):
        return str(args.dsn), "--dsn"
    if url := os.environ.get("DATABASE_URL"):
        return url, "DATABASE_URL"
    return "", "the PG* environment variables"


def describe_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparsable connection string"
    shown = {key: str(value) for key, value in params.items() if key != "password" and value is not None}
    def rank(key: str) -> tuple[int, str]:
        return (DSN_ORDER.index(key) if key in DSN_ORDER else len(DSN_ORDER), key)

    ordered = sorted(shown, key=rank)
    return make_conninfo("", **{key: shown[key] for key in ordered}) if shown else "libpq defaults"


def connect(args: argparse.Namespace, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A connection for a subcommand, or CommandError saying why not."""
    dsn, source = resolve_dsn(args)
    return connect_dsn(dsn, source, autocommit=autocommit)


def connect_dsn(dsn: str, source: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A connection to dsn (which came from source), or CommandError."""
    options: dict[str, Any] = {"autocommit": autocommit, "application_name": "pyqueue"}
    if not os.environ.get("PGCONNECT_TIMEOUT") and "connect_timeout" not in dsn:
        options["connect_timeout"] = CONNECT_TIMEOUT
    try:
        return psycopg.connect(dsn, **options)
    except psycopg.OperationalError as exc:
        raise CommandError(
            f"cannot connect to PostgreSQL ({describe_dsn(dsn)}, from {source}): {str(exc).strip()}",
            hint=CONNECT_HINTS.get(source) or (f"Check the DSN {source} is made with."
                                               if source.startswith("the Worker") else CONNECT_HINTS[""]),
        ) from exc
    except psycopg.ProgrammingError as exc:
        raise CommandError(f"invalid connection string from {source}: {exc}", exit_code=EXIT_REFUSED) from exc
