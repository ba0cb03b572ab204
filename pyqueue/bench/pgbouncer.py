"""A real PgBouncer (Debian's ``pgbouncer``) in front of one database, for
the pooler benchmark and the tests: transaction pooling, on a free loopback
port, in a directory of its own, started in the foreground and stopped by
its pid. As root it runs as the server user (PgBouncer refuses root), with
its open-file limit raised to the hard limit so that a thousand clients fit.
"""

from __future__ import annotations

import os
import pwd
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

BINARY = Path("/usr/sbin/pgbouncer")
SERVER_USER = "postgres"  # who runs PgBouncer (and the servers) when we are root
START_TIMEOUT = 30.0  # seconds PgBouncer gets to accept connections


def free_port() -> int:
    """A TCP port on the loopback interface that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_user_kwargs() -> dict[str, Any]:
    """Popen arguments that run a server program as the server user when we
    are root (PostgreSQL and PgBouncer refuse to run as root)."""
    if os.geteuid() == 0:
        return {"user": SERVER_USER, "group": SERVER_USER, "extra_groups": []}
    return {}


def chown_for_server(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SERVER_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def more_files() -> None:
    """As many open files as the hard limit allows, for this process and the
    PgBouncer it starts (which inherits the limit): PgBouncer needs one per
    client and one per server connection."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class PgBouncer:
    """PgBouncer in transaction pooling mode in front of ``dbname`` on
    ``host:port``, with ``pool_size`` server connections for it; it listens
    on ``listen_port``, or on a free loopback port."""

    def __init__(self, directory: Path, *, host: str, port: int, dbname: str, pool_size: int,
                 max_client_conn: int = 500, listen_port: int | None = None) -> None:
        self.directory = directory
        self.port = free_port() if listen_port is None else listen_port
        self.dbname = dbname
        self.ini = directory / "pgbouncer.ini"
        self.log = directory / "pgbouncer.log"
        userlist = directory / "userlist.txt"
        userlist.write_text(f'"{SERVER_USER}" ""\n')
        self.ini.write_text("\n".join([
            "[databases]",
            f"{dbname} = host={host} port={port} dbname={dbname} user={SERVER_USER}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {userlist}",
            "pool_mode = transaction",
            f"default_pool_size = {pool_size}",
            f"max_client_conn = {max_client_conn}",
            f"admin_users = {SERVER_USER}",
            f"logfile = {self.log}",
            "ignore_startup_parameters = extra_float_digits",
            "stats_period = 1",  # seconds: SHOW STATS totals lag by up to this much
            "",
        ]))
        for path in (directory, self.ini, userlist):
            chown_for_server(path)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={SERVER_USER} dbname={self.dbname}"

    @property
    def admin_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={SERVER_USER} dbname=pgbouncer"

    def start(self) -> PgBouncer:
        more_files()
        self.proc = subprocess.Popen([str(BINARY), str(self.ini)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, **server_user_kwargs())
        deadline = time.monotonic() + START_TIMEOUT
        while not self._accepts():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not accept connections within {START_TIMEOUT:g} s:\n"
                                   f"{self.output()}")
            time.sleep(0.1)
        return self

    def _accepts(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited {self.proc.returncode}:\n{self.output()}")
        try:
            with psycopg.connect(self.dsn, connect_timeout=2, prepare_threshold=None) as probe:
                probe.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (simple query protocol only)."""
        with psycopg.connect(self.admin_dsn, autocommit=True, prepare_threshold=None,
                             cursor_factory=psycopg.ClientCursor) as admin:
            cur = admin.execute(f"SHOW {what}")
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # PgBouncer's "immediate shutdown"
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
