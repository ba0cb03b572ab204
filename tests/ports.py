"""TCP ports for the servers the tests start (dashboards, metrics endpoints,
PgBouncer, restarted PostgreSQL servers), and a check that a port's
listener is the process a test started.

The kernel's free port (a bind to port 0) is free at that instant only:
two pytest-xdist processes, or two calls in one test, can be handed the
same port, and the second server to start then fails to bind while the
test talks to the first one (CI of 2026-11-27: a plain dashboard answered
a test of a mounted one). So every port is also claimed for the whole run,
by a file created exclusively in a directory that the run's processes
share (made by the controlling pytest process, which names it in
JOBQ_TEST_PORTS for the xdist processes it starts), and a server counts as
started only once its own process listens on the port."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

CLAIMS = 200  # ports tried before giving up
CLAIMS_VARIABLE = "JOBQ_TEST_PORTS"
MADE: list[str] = []  # the claims directory this process made, if it made one


def claims_directory() -> Path:
    """Where this run's port claims live: the directory named in
    JOBQ_TEST_PORTS, or one of this process's own outside a pytest run."""
    named = os.environ.get(CLAIMS_VARIABLE)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"jobq-test-ports-{os.getpid()}"


def start_claims() -> None:
    """Make the run's claims directory and name it for the processes to come;
    a pytest run inside a test's run keeps (and shares) the outer one's."""
    if not os.environ.get(CLAIMS_VARIABLE):
        MADE.append(tempfile.mkdtemp(prefix="jobq-test-ports-"))
        os.environ[CLAIMS_VARIABLE] = MADE[-1]


def claim(port: int) -> bool:
    """Claim port for the rest of the run; False if someone in the run has."""
    directory = claims_directory()
    directory.mkdir(exist_ok=True)
    try:
        os.close(os.open(directory / str(port), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


def free_port() -> int:
    """A loopback TCP port nobody listens on now and no other test of the
    run has been given."""
    for _ in range(CLAIMS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if claim(port):
            return port
    raise RuntimeError(f"no unclaimed free port in {CLAIMS} tries under {claims_directory()}")


def forget_claims() -> None:
    """Remove the claims directory this process made (the controlling one, at the end)."""
    while MADE:
        shutil.rmtree(MADE.pop(), ignore_errors=True)
        os.environ.pop(CLAIMS_VARIABLE, None)


def listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP port (IPv4 or IPv6), from /proc/net."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


def listens(pid: int, port: int) -> bool:
    """Whether process pid itself holds a socket listening on port."""
    wanted = {f"socket:[{inode}]" for inode in listening_inodes(port)}
    if not wanted:
        return False
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except (FileNotFoundError, PermissionError):
        return False
    for descriptor in descriptors:
        try:
            if os.readlink(descriptor) in wanted:
                return True
        except OSError:
            continue
    return False
