"""A throwaway local PostgreSQL server: for `pyqueue demo`, `pyqueue bench`,
`make db-start` and the pgTAP runner.

The server listens on a Unix socket inside its own directory (no TCP unless
asked), loads pg_cron when the machine has it, and is stopped by its own
pg_ctl. PostgreSQL refuses to run as root, so when this process is root the
server commands run as the ``postgres`` user through ``runuser``.

Command line::

    python -m pyqueue.localserver start DIR [--port N] [--database NAME] [--tcp]
    python -m pyqueue.localserver stop DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

DEFAULT_PORT = 5432  # the socket lives in the server's own directory
DEFAULT_DATABASE = "jobq"
SERVER_USER = "postgres"  # who runs the server when we are root
START_TIMEOUT = 60  # seconds


def find_bindir() -> Path:
    """The directory of the PostgreSQL server binaries (initdb, pg_ctl)."""
    candidates: list[Path] = []
    if env := os.environ.get("PG_BINDIR"):
        candidates.append(Path(env))
    if pg_config := shutil.which("pg_config"):
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(versions)
    for candidate in candidates:
        if (candidate / "pg_ctl").is_file() and (candidate / "initdb").is_file():
            return candidate
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found; install postgresql-15 "
        "or set PG_BINDIR to their directory"
    )


def has_pg_cron(bindir: Path) -> bool:
    """Whether this PostgreSQL installation ships the pg_cron library."""
    out = subprocess.run(
        [str(bindir / "pg_config"), "--pkglibdir"], capture_output=True, text=True, check=False
    )
    libdir = Path(out.stdout.strip()) if out.returncode == 0 else bindir.parent / "lib"
    return (libdir / "pg_cron.so").is_file()


@dataclass
class LocalServer:
    """A PostgreSQL server in ``directory``, started and stopped by us."""

    directory: Path
    port: int = DEFAULT_PORT
    database: str = DEFAULT_DATABASE
    tcp: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    bindir: Path = field(default_factory=find_bindir)

    @property
    def datadir(self) -> Path:
        return self.directory / "data"

    @property
    def logfile(self) -> Path:
        return self.directory / "server.log"

    @property
    def host(self) -> str:
        return str(self.directory)

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user=postgres dbname={self.database}"

    @property
    def pg_cron(self) -> bool:
        return has_pg_cron(self.bindir)

    def _as_server_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", SERVER_USER, "--", *argv]
        return argv

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(self._as_server_user(argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = self.logfile.read_text(errors="replace")[-2000:] if self.logfile.exists() else ""
            raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}{log}")

    def options(self) -> str:
        opts = {
            "port": str(self.port),
            "unix_socket_directories": f"'{self.directory}'",
            "listen_addresses": "'127.0.0.1'" if self.tcp else "''",
            "fsync": "off",  # throwaway data: durability buys nothing here
            "max_connections": "200",
        }
        if self.pg_cron:
            opts["shared_preload_libraries"] = "pg_cron"
            opts["cron.database_name"] = f"'{self.database}'"
            opts["cron.host"] = f"'{self.directory}'"
        opts.update(self.settings)
        return " ".join(f"-c {name}={value}" for name, value in opts.items())

    def running(self) -> bool:
        """Whether a server runs on this data directory (``pg_ctl status``)."""
        if not (self.datadir / "PG_VERSION").exists():
            return False
        status = subprocess.run(
            self._as_server_user([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "status"]),
            capture_output=True, text=True, check=False,
        )
        return status.returncode == 0

    def start(self) -> LocalServer:
        """initdb (first time), start, and create the database."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, SERVER_USER)
        if not (self.datadir / "PG_VERSION").exists():
            self._run([
                str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", "postgres",
                "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync",
            ])
        self.launch()
        self.create_database()
        return self

    def launch(self) -> None:
        """Start the server on its data directory as it is (no initdb, no
        database made): a standby, or a server stopped before."""
        self._run([
            str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-w", "-t", str(START_TIMEOUT),
            "-l", str(self.logfile), "-o", self.options(), "start",
        ])

    def create_database(self) -> None:
        psql = [str(self.bindir / "psql"), "-h", self.host, "-p", str(self.port), "-U", "postgres",
                "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        exists = subprocess.run(
            [*psql, "-d", "postgres", "-tA", "-c",
             f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"],
            capture_output=True, text=True, check=False,
        )
        if exists.stdout.strip() != "1":
            self._run([*psql, "-d", "postgres", "-c", f'CREATE DATABASE "{self.database}"'])
        if self.pg_cron:
            self._run([*psql, "-d", self.database, "-c", "CREATE EXTENSION IF NOT EXISTS pg_cron"])

    def stop(self, mode: str = "fast") -> None:
        """Stop the server if it runs: ``mode`` is pg_ctl's shutdown mode
        (``immediate``: no checkpoint, as in a crash)."""
        if (self.datadir / "postmaster.pid").exists():
            self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop"])

    def standby(self, directory: Path, port: int, name: str) -> LocalServer:
        """A streaming standby of this running server in ``directory`` (not yet
        started: ``launch()`` it): ``pg_basebackup -R``, with ``name`` as its
        ``cluster_name`` and its ``application_name`` on the primary (the name
        ``synchronous_standby_names`` lists), and this server's settings (a
        standby refuses to run with less of max_connections and the like)."""
        directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(directory, SERVER_USER)
        source = f"host={self.host} port={self.port} user=postgres application_name={name}"
        target = LocalServer(directory, port=port, database=self.database, tcp=self.tcp,
                             settings={**self.settings, "cluster_name": name}, bindir=self.bindir)
        self._run([str(self.bindir / "pg_basebackup"), "-d", source, "-D", str(target.datadir),
                   "-R", "-X", "stream", "-c", "fast", "--no-sync"])
        return target

    def promote(self) -> None:
        """End this standby's recovery: it becomes a primary (``pg_ctl promote``, waits)."""
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-w", "promote"])

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def temporary_directory(prefix: str) -> Path:
    """A fresh directory that the server user can write to (short path: sockets)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.localserver", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="initdb if needed, start, create the database; print the DSN")
    start.add_argument("directory", type=Path)
    start.add_argument("--port", type=int, default=DEFAULT_PORT)
    start.add_argument("--database", default=DEFAULT_DATABASE)
    start.add_argument("--tcp", action="store_true", help="also listen on 127.0.0.1")
    stop = sub.add_parser("stop", help="stop the server in DIRECTORY")
    stop.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            server = LocalServer(args.directory.resolve(), port=args.port, database=args.database,
                                 tcp=args.tcp)
            if server.running():
                # Nothing to start: say so (no traceback, no old log lines) and
                # make sure the database is there, so the DSN printed works.
                print(f"the server in {server.directory} is already running")
                server.create_database()
            else:
                server.start()
            print(server.dsn)
        else:
            LocalServer(args.directory.resolve()).stop()
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
