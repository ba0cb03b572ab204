"""Install and upgrade jobq from Python, for databases where ``CREATE
EXTENSION`` is not possible (managed Postgres: no superuser, no server files).

``install`` applies the newest full install script at or below the target
version, then the upgrade steps up to the target; ``upgrade`` applies upgrade
steps only (or ``ALTER EXTENSION jobq UPDATE`` when jobq is an extension).
Each runs in one transaction under an advisory lock, so a failing script
changes nothing and two concurrent runs do not race: the second waits, then
finds the first one's work done. Neither ever downgrades.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from typing import Any, Literal

import psycopg
from psycopg import sql

from pyqueue._sqlfiles import VERSION, SchemaError, Script, SqlScripts, version_key

__all__ = [
    "Installed",
    "SchemaChange",
    "SchemaError",
    "install",
    "installed",
    "installed_version",
    "packaged_version",
    "upgrade",
]

# Key of the transaction-scoped advisory lock that serialises installs and
# upgrades within one database ("jobq" in ASCII).
SCHEMA_LOCK_KEY = 0x6A6F6271

AnyConnection = psycopg.Connection[Any]


@dataclass(frozen=True)
class Installed:
    """jobq as found in a database."""

    version: str
    extension: bool  # True: CREATE EXTENSION jobq; False: installed from scripts


@dataclass(frozen=True)
class SchemaChange:
    """What install() or upgrade() did."""

    action: Literal["installed", "upgraded", "unchanged"]
    version: str  # the version now installed
    previous: str | None  # the version before (None: jobq was not installed)
    extension: bool = False
    scripts: list[str] = field(default_factory=list)  # applied, in order

    def describe(self) -> str:
        """One human sentence, for the CLI."""
        how = " (extension)" if self.extension else ""
        if self.action == "unchanged":
            return f"jobq {self.version} is already installed{how}; nothing to do"
        if self.action == "installed":
            return f"installed jobq {self.version} ({', '.join(self.scripts)})"
        applied = f" ({', '.join(self.scripts)})" if self.scripts else ""
        return f"upgraded jobq from {self.previous} to {self.version}{how}{applied}"


def packaged_version(sql_dir: Traversable | None = None) -> str:
    """The version install() and upgrade() aim at by default."""
    return SqlScripts.load(sql_dir).latest


def installed(conn: AnyConnection) -> Installed | None:
    """How jobq is installed in conn's database, or None when it is not."""
    row = conn.execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jobq'").fetchone()
    if row is not None:
        return Installed(str(row[0]), extension=True)
    row = conn.execute(
        "SELECT pg_catalog.to_regnamespace('jobq') IS NOT NULL,"
        " pg_catalog.to_regprocedure('jobq.version()') IS NOT NULL"
    ).fetchone()
    assert row is not None
    has_schema, has_version = row
    if not has_schema:
        return None
    if not has_version:
        raise SchemaError(
            "schema jobq exists but has no jobq.version(): it is not a jobq installation",
            hint="Drop or rename that schema, or install jobq into another database.",
        )
    row = conn.execute("SELECT jobq.version()").fetchone()
    assert row is not None
    return Installed(str(row[0]), extension=False)


def installed_version(conn: AnyConnection) -> str | None:
    """The jobq version installed in conn's database (None: not installed)."""
    found = installed(conn)
    return found.version if found else None


def install(
    conn: AnyConnection, version: str | None = None, *, sql_dir: Traversable | None = None
) -> SchemaChange:
    """Bring jobq to ``version`` (default: the packaged version): install it
    when missing, upgrade it when older, do nothing when already there.

    Runs in one transaction (a savepoint when conn already has one open); the
    session's search_path is left as it was.
    """
    with _locked(conn, version, sql_dir) as (scripts, target, current):
        if current is None:
            plan = scripts.install_path(target)
            _apply(conn, plan, target)
            return SchemaChange("installed", target, None, scripts=[s.name for s in plan])
        return _upgrade_locked(conn, scripts, current, target)


def upgrade(
    conn: AnyConnection, target: str | None = None, *, sql_dir: Traversable | None = None
) -> SchemaChange:
    """Upgrade an installed jobq to ``target`` (default: the packaged version)
    through the upgrade scripts in order, or with ``ALTER EXTENSION jobq
    UPDATE`` when jobq is an extension. One transaction; never downgrades."""
    with _locked(conn, target, sql_dir) as (scripts, goal, current):
        if current is None:
            raise SchemaError("jobq is not installed in this database", hint="Run `pyqueue install` first.")
        return _upgrade_locked(conn, scripts, current, goal)


@contextmanager
def _locked(
    conn: AnyConnection, version: str | None, sql_dir: Traversable | None
) -> Iterator[tuple[SqlScripts, str, Installed | None]]:
    """The packaged scripts, the target version (default: the newest) and
    what is installed, read inside the transaction (under jobq's install
    lock) that the change then runs in."""
    scripts = SqlScripts.load(sql_dir)
    target = check_version(version or scripts.latest)
    with conn.transaction():
        _lock(conn)
        yield scripts, target, installed(conn)


def check_version(version: str) -> str:
    """version, if it is spelled X.Y.Z (SchemaError otherwise)."""
    if not VERSION.match(version):
        raise SchemaError(f"{version!r} is not a jobq version", hint="Versions look like 0.2.0.")
    return version


def _lock(conn: AnyConnection) -> None:
    conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))


def _upgrade_locked(
    conn: AnyConnection, scripts: SqlScripts, current: Installed, target: str
) -> SchemaChange:
    if current.version == target:
        return SchemaChange("unchanged", target, target, extension=current.extension)
    if version_key(current.version) > version_key(target):
        raise SchemaError(
            f"jobq {current.version} is installed; refusing to downgrade to {target}",
            hint="jobq never downgrades. Use a pyqueue release that matches the database, "
            "or restore a backup taken before the upgrade.",
        )
    if current.extension:
        try:
            conn.execute(sql.SQL("ALTER EXTENSION jobq UPDATE TO {}").format(sql.Literal(target)))
        except psycopg.Error as exc:
            raise SchemaError(
                f"ALTER EXTENSION jobq UPDATE TO '{target}' failed: {exc}",
                hint="jobq is installed as an extension: install the new version's files on the "
                "server (make install) so that PostgreSQL finds the upgrade scripts.",
            ) from exc
        return SchemaChange("upgraded", target, current.version, extension=True)
    scripts.check_known(target)
    plan = scripts.upgrade_path(current.version, target)
    if plan is None:
        raise SchemaError(
            f"no upgrade path from jobq {current.version} to {target} in {scripts.location}",
            hint="Every step needs a jobq--A--B.sql script; upgrade pyqueue to a release that has them.",
        )
    _apply(conn, plan, target)
    return SchemaChange("upgraded", target, current.version, scripts=[s.name for s in plan])


def _apply(conn: AnyConnection, plan: list[Script], target: str) -> None:
    """Run the scripts in conn's open transaction, check the result, and put
    back the search_path the scripts change (SET is session-level)."""
    row = conn.execute("SELECT pg_catalog.current_setting('search_path')").fetchone()
    assert row is not None
    search_path = str(row[0])
    for script in plan:
        try:
            # No parameters: psycopg sends the text with the simple query
            # protocol, which runs every statement of the file.
            conn.execute(script.read().encode())
        except psycopg.Error as exc:
            raise SchemaError(
                f"{script.name} failed, nothing was changed: {exc}",
                hint=getattr(exc.diag, "message_hint", None),
            ) from exc
    conn.execute("SELECT pg_catalog.set_config('search_path', %s, false)", (search_path,))
    row = conn.execute("SELECT jobq.version()").fetchone()
    if row is None or row[0] != target:
        found = None if row is None else row[0]
        raise SchemaError(
            f"after {plan[-1].name}, jobq.version() reports {found} instead of {target}; nothing was changed",
            hint="Every install or upgrade script must (re)define jobq.version() to return its version.",
        )
