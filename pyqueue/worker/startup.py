"""What every worker checks before it starts: ``Worker.run()``,
``AsyncWorker.run()``, ``listen()`` and its asyncio twin, and so ``pyqueue
worker`` too.

One connection, made once: a bad DSN or an unreachable server raises its
``psycopg.OperationalError`` at once (the workers reconnect with backoff only
after a first connection has worked); jobq missing raises
:class:`pyqueue.JobqNotInstalled`. Then one INFO line says what starts
(queues, settings, database, versions: an older jobq than this pyqueue's is
worked quietly, as far as it goes, and a call it lacks raises
:class:`pyqueue.JobqOutdated`), and a WARNING names the queues jobq has
never seen (a typo?) with the ones it knows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pyqueue._sqlfiles import SchemaError
from pyqueue._version import __version__
from pyqueue.defaults import WORKER_APPLICATION_NAME
from pyqueue.errors import JobqNotInstalled
from pyqueue.worker.connections import aconnect, connect

logger = logging.getLogger("pyqueue.worker")

# jobq.version() when jobq is there, NULL when its schema is not, and a
# schema without it (not jobq's) told apart.
PROBE = ("SELECT pg_catalog.to_regnamespace('jobq') IS NOT NULL,"
         " pg_catalog.to_regprocedure('jobq.version()') IS NOT NULL")
KNOWN_QUEUES = "SELECT s.queue FROM jobq.stats AS s ORDER BY s.queue"
SHOWN_QUEUES = 20  # known queues named in the warning, at most


def package_version() -> str:
    """This pyqueue's version: ``pyqueue.__version__``, the version of the
    code that runs (a test keeps it equal to pyproject's). Not read from the
    installed distribution's metadata: importlib.metadata scans sys.path for
    it, about 1 ms of CPU at every worker's start (more with a longer
    sys.path), and it names what pip installed, not necessarily what runs."""
    return __version__


@dataclass(frozen=True)
class Database:
    """What the first connection found."""

    where: str  # host=... port=... dbname=... user=...
    version: str  # jobq's installed version
    known_queues: list[str] | None  # None: jobq.stats could not be read


def _found(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], probe: tuple[Any, ...]) -> str:
    has_schema, has_version = probe
    if not has_schema:
        raise JobqNotInstalled()
    if not has_version:
        raise SchemaError("schema jobq exists but has no jobq.version(): it is not a jobq installation",
                          hint="Drop or rename that schema, or point the worker at another database.")
    info = conn.info
    return f"host={info.host} port={info.port} dbname={info.dbname} user={info.user}"


def check(dsn: str) -> Database:
    """Connect once to ``dsn`` and find jobq (raises as the module says)."""
    conn = connect(dsn, WORKER_APPLICATION_NAME, prepare=False)
    with conn, conn.cursor(row_factory=tuple_row) as cur:
        probe = cur.execute(PROBE).fetchone()
        assert probe is not None
        where = _found(conn, probe)
        version = cur.execute("SELECT jobq.version()").fetchone()
        assert version is not None
        try:
            known: list[str] | None = [row[0] for row in cur.execute(KNOWN_QUEUES).fetchall()]
        except psycopg.Error:  # e.g. a role without read access to jobq.stats
            known = None
    return Database(where, str(version[0]), known)


async def acheck(dsn: str) -> Database:
    """The asyncio twin of :func:`check`."""
    conn = await aconnect(dsn, WORKER_APPLICATION_NAME, prepare=False)
    async with conn, conn.cursor(row_factory=tuple_row) as cur:
        probe = await (await cur.execute(PROBE)).fetchone()
        assert probe is not None
        where = _found(conn, probe)
        version = await (await cur.execute("SELECT jobq.version()")).fetchone()
        assert version is not None
        try:
            known: list[str] | None = [row[0] for row in await (await cur.execute(KNOWN_QUEUES)).fetchall()]
        except psycopg.Error:
            known = None
    return Database(where, str(version[0]), known)


def report(database: Database, what: str, queues: list[str], settings: str) -> None:
    """The startup line, and the warning about unknown queues."""
    logger.info("%s starting: queues %s; %s; database %s; jobq %s installed; pyqueue %s",
                what, ", ".join(queues), settings, database.where, database.version, package_version())
    known = database.known_queues
    if known is not None and (unknown := [queue for queue in queues if queue not in known]):
        shown = ", ".join(known[:SHOWN_QUEUES]) + (", ..." if len(known) > SHOWN_QUEUES else "")
        logger.warning("jobq has never seen queue%s %s (no job, setting or count): a typo? Known queues: %s",
                       "s" if len(unknown) > 1 else "", ", ".join(unknown), shown or "none yet")
