"""The ports the tests give their servers (tests/ports.py): never the same
one twice in a run, and a server counts as listening only when its own
process holds the listening socket."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from tests.ports import claims_directory, free_port, listens

LISTENER = """
import socket, sys, time
sock = socket.socket()
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
print("listening", flush=True)
time.sleep(60)
"""


def test_free_ports_are_claimed_for_the_run_and_never_handed_out_twice() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    claimed = {int(path.name) for path in claims_directory().iterdir()}
    assert set(ports) <= claimed
    assert os.environ["JOBQ_TEST_PORTS"] == str(claims_directory())  # made by the controlling process


def test_listens_names_only_the_process_that_holds_the_listening_socket() -> None:
    port = free_port()
    assert not listens(os.getpid(), port)
    with subprocess.Popen([sys.executable, "-c", LISTENER, str(port)], stdout=subprocess.PIPE,
                          text=True) as process:
        try:
            assert process.stdout is not None and process.stdout.readline() == "listening\n"
            assert listens(process.pid, port)
            assert not listens(os.getpid(), port)  # another process's listener is not ours
            with socket.socket() as mine:  # a socket bound but not listening does not count
                mine.bind(("127.0.0.1", free_port()))
                assert not listens(os.getpid(), mine.getsockname()[1])
                mine.listen()
                assert listens(os.getpid(), mine.getsockname()[1])
        finally:
            process.kill()
    deadline = time.monotonic() + 10
    while listens(process.pid, port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not listens(process.pid, port)
