"""A real primary and a real streaming standby on this machine, for the
failover tests (tests/test_failover.py).

The primary is a ``pyqueue.localserver.LocalServer`` (initdb, Unix socket
in its own directory); the standby is made from it with ``pg_basebackup -R``
(``LocalServer.standby``), started with the primary's settings, and named
in the primary's ``synchronous_standby_names``, so that a commit returns
only once the standby has the WAL: "committed" means "survives the
failover". Clients use ``dsn``: both hosts
with ``target_session_attrs=read-write``, so libpq finds whichever one is
the primary now.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from pyqueue.localserver import LocalServer, temporary_directory
from tests.chaos_support import install_script
from tests.worker_support import wait_until

Conn = psycopg.Connection[Any]

DATABASE = "postgres"  # there already: no CREATE DATABASE (seconds on a busy machine)
STANDBY_NAME = "standby1"  # its cluster_name and its application_name on the primary
PRIMARY_PORT = STANDBY_PORT = 5432  # each socket lives in its server's own directory, as on two hosts
SETTINGS = {
    "max_connections": "100",
    "max_wal_senders": "5",
    "wal_level": "replica",
    "hot_standby": "on",
    "synchronous_commit": "on",  # with synchronous_standby_names: a commit waits for the standby
    "wal_receiver_status_interval": "1s",
}


@dataclass
class Cluster:
    """A primary, its synchronous standby, and the multi-host DSN of both."""

    primary: LocalServer
    standby: LocalServer
    promoted_at: float | None = None  # time.time() once the standby was promoted (pg_ctl promote returned)
    stopped_at: float | None = None  # time.time() when the primary was stopped

    def _dsn(self, *servers: LocalServer, **extra: Any) -> str:
        hosts, ports = ",".join(s.host for s in servers), ",".join(str(s.port) for s in servers)
        return make_conninfo(host=hosts, port=ports, user="postgres", dbname=DATABASE, **extra)

    @property
    def dsn(self) -> str:
        """Both servers; libpq connects to the one that takes writes."""
        return self._dsn(self.primary, self.standby, target_session_attrs="read-write", connect_timeout=3)

    @property
    def primary_dsn(self) -> str:
        return self._dsn(self.primary)

    @property
    def standby_dsn(self) -> str:
        return self._dsn(self.standby)

    def connect(self) -> Conn:
        """An autocommit connection to whichever server takes writes now."""
        return psycopg.connect(self.dsn, autocommit=True)

    def synchronous(self) -> bool:
        """Whether the primary sees the standby as its synchronous standby, streaming."""
        with psycopg.connect(self.primary_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT sync_state, state FROM pg_stat_replication "
                               "WHERE application_name = %s", (STANDBY_NAME,)).fetchone()
        return row == ("sync", "streaming")

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            try:
                server.stop("immediate")
            except RuntimeError as error:  # one that is not running says so; keep stopping the other
                print(f"stopping {server.directory}: {error}")


@contextmanager
def cluster() -> Iterator[Cluster]:
    """A running primary with jobq installed and its synchronous standby; both
    stopped and removed after."""
    base = temporary_directory("jobq-failover-")
    primary = LocalServer(base / "a", port=PRIMARY_PORT, database=DATABASE, settings=dict(SETTINGS))
    standby = LocalServer(base / "b", port=STANDBY_PORT, database=DATABASE)  # made by pg_basebackup below
    both = Cluster(primary, standby)
    try:
        primary.start()
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            conn.execute(install_script().encode())
            rules = conn.execute("SELECT count(*) FROM pg_hba_file_rules "
                                 "WHERE 'replication' = ANY(database) AND type = 'local'").fetchone()
            assert rules is not None and rules[0] > 0, "pg_hba.conf lets no replication connection in"
        both.standby = standby = primary.standby(base / "b", STANDBY_PORT, STANDBY_NAME)
        standby.launch()
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.execute("SELECT pg_reload_conf()")
        wait_until(both.synchronous, "the standby streaming as the synchronous standby", timeout=30)
        yield both
    finally:
        both.stop()
        shutil.rmtree(base, ignore_errors=True)
