"""``pyqueue install``, ``upgrade`` and ``version``: jobq's SQL brought into a
database, and which versions are where."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import psycopg

from pyqueue import schema
from pyqueue.cli.command import EXIT_OK, Command, connect
from pyqueue.worker.startup import package_version


def configure_install(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", dest="target", metavar="X.Y.Z",
                        help="install this version instead of the newest packaged one")


def run_install(args: argparse.Namespace) -> int:
    return show_change(args, schema.install)


def configure_upgrade(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", dest="target", metavar="X.Y.Z",
                        help="upgrade to this version instead of the newest packaged one")


def run_upgrade(args: argparse.Namespace) -> int:
    return show_change(args, schema.upgrade)


def show_change(args: argparse.Namespace,
                change: Callable[[psycopg.Connection[Any], str | None], schema.SchemaChange]) -> int:
    """Install or upgrade to ``args.target`` and say what changed."""
    with connect(args) as conn:
        done = change(conn, args.target)
    print(done.describe())
    return EXIT_OK


def configure_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--installed", action="store_true",
                        help="also connect and show the jobq version installed in the database")


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


INSTALL = Command(
    "install", "install jobq into a database (or bring it to the packaged version)",
    "Install the jobq schema with the SQL scripts shipped in pyqueue: no superuser and no server "
    "files needed (managed Postgres). Applies the newest full install script up to the target "
    "version, then the upgrade scripts, in one transaction. Already at the target: does nothing. "
    "Installed but older: upgrades. Never downgrades.",
    configure_install, run_install,
)

UPGRADE = Command(
    "upgrade", "upgrade an installed jobq",
    "Apply the jobq upgrade scripts in order, in one transaction, up to the packaged version "
    "(or --to). When jobq was installed with CREATE EXTENSION, runs ALTER EXTENSION jobq UPDATE "
    "instead. Never downgrades.",
    configure_upgrade, run_upgrade,
)

VERSION = Command(
    "version", "show the pyqueue and jobq versions",
    "Show the pyqueue package version and the jobq SQL version it ships; with --installed, "
    "also the version installed in the database.",
    configure_version, run_version,
)
