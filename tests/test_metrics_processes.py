"""Metrics in real processes: ``pyqueue worker --metrics-port`` (stopped by a
real SIGTERM), a worker without metrics that loads nothing of them, a clear
error without prometheus-client, and the dashboard's ``GET /metrics``."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from tests.conftest import ROOT
from tests.dashboard_http_support import dashboard
from tests.metrics_support import (
    Conn,
    fetch,
    from_stats,
    jobq_series,
    key,
    outcomes,
    parse,
    scrape,
)
from tests.ports import free_port
from tests.worker_support import scalar, wait_until

RUN_TIMEOUT = 120  # seconds a probe process may take
PLAIN_WORKER = '''
import json, sys, threading

import pyqueue

dsn, out = sys.argv[1], sys.argv[2]
done = threading.Event()
worker = pyqueue.Worker(dsn, poll_interval=0.2)
worker.register("plain", lambda job: done.set())
thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
thread.start()
handled = done.wait(60)
worker.stop()
thread.join(60)
with open(out, "w") as file:
    json.dump({"handled": handled, "modules": sorted(sys.modules)}, file)
'''
WITHOUT_PROMETHEUS = '''
import sys

sys.modules["prometheus_client"] = None  # what Python does when it is not installed: ImportError
import pyqueue

try:
    pyqueue.Worker(sys.argv[1], metrics_port=0)
except ImportError as error:
    print(error)
else:
    sys.exit("a Worker with metrics_port was made without prometheus-client")
'''


def python(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)


def test_a_worker_without_metrics_loads_none_of_them(conn: Conn, dsn: str, tmp_path: Path) -> None:
    conn.execute("SELECT jobq.enqueue('plain', '{}')")
    out = tmp_path / "probe.json"
    done = python("-c", textwrap.dedent(PLAIN_WORKER), dsn, str(out))
    assert done.returncode == 0, done.stderr
    probe = json.loads(out.read_text())
    assert probe["handled"] is True and "pyqueue.worker.observer" in probe["modules"]
    loaded = [name for name in probe["modules"]
              if name.split(".")[0] == "prometheus_client" or name.startswith("pyqueue.metrics")]
    assert loaded == []


def test_metrics_without_prometheus_client_fail_at_construction(dsn: str) -> None:
    done = python("-c", textwrap.dedent(WITHOUT_PROMETHEUS), dsn)
    assert done.returncode == 0, done.stderr
    assert "metrics_port needs prometheus-client" in done.stdout
    assert "pip install 'jobq[metrics]'" in done.stdout


def worker_argv(dsn: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "pyqueue", "worker", "tests.cli_handlers:handle", "--queue", "mq",
            "--dsn", dsn, "--poll-interval", "0.2", *options]


def test_pyqueue_worker_serves_metrics_until_sigterm(conn: Conn, dsn: str, tmp_path: Path) -> None:
    for payload in ({}, {}, {"fail": "on purpose"}):
        conn.execute("SELECT jobq.enqueue('mq', %s::jsonb, max_attempts => 1)", (json.dumps(payload),))
    port = free_port()
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(worker_argv(dsn, "--metrics-port", str(port)), cwd=ROOT, stdout=out,
                                  stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: scalar(conn, "SELECT completed_total + dead_total FROM jobq.stats "
                                  "WHERE queue = 'mq'") == 3, "the worker to settle 3 jobs")
        wait_until(lambda: sum(outcomes(scrape(port), "mq").values()) == 3, "3 runs counted")
        samples = scrape(port)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(RUN_TIMEOUT)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert worker.returncode == 0, log.read_text()
    assert outcomes(samples, "mq") == {"completed": 2, "failed": 1}
    assert samples[key("pyqueue_jobs_in_flight", queue="mq")] == 0.0
    assert jobq_series(samples) == from_stats(conn)[0]
    assert samples[key("jobq_completed_total", queue="mq")] == 2.0
    assert samples[key("jobq_dead_total", queue="mq")] == 1.0
    assert f"serving metrics on http://127.0.0.1:{port}/metrics" in log.read_text()
    with pytest.raises(OSError):  # the process is gone, and its server with it
        scrape(port)


def test_pyqueue_worker_refuses_bad_metrics_options(dsn: str) -> None:
    lonely = subprocess.run(worker_argv(dsn, "--metrics-host", "0.0.0.0"), cwd=ROOT, capture_output=True,
                            text=True, timeout=RUN_TIMEOUT, check=False)
    assert lonely.returncode == 2 and "--metrics-host needs --metrics-port" in lonely.stderr
    bad = subprocess.run(worker_argv(dsn, "--metrics-port", "70000"), cwd=ROOT, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT, check=False)
    assert bad.returncode == 2 and "must be a TCP port" in bad.stderr
    with socket.socket() as taken:  # a port another program listens on
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run(worker_argv(dsn, "--metrics-port", str(port)), cwd=ROOT, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT, check=False)
    assert busy.returncode == 1, busy.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in busy.stderr
    assert "Traceback" not in busy.stderr


def test_the_dashboard_serves_jobq_metrics_and_jobq_up_0(conn: Conn, dsn: str, tmp_path: Path) -> None:
    for queue in ("d1", "d1", "d2"):
        conn.execute("SELECT jobq.enqueue(%s, '{}')", (queue,))
    conn.execute("SELECT jobq.complete(id, lease_token) FROM jobq.claim('d2', 1, 'metrics-test')")
    with dashboard(dsn, tmp_path) as served:  # a real `pyqueue dashboard` process
        url = f"http://127.0.0.1:{served.port}/metrics"
        body, content_type = fetch(url)
        conn.execute("ALTER FUNCTION jobq.metrics() RENAME TO metrics_elsewhere")  # now it cannot be read
        unreadable, _ = fetch(url)  # still a 200 (fetch raises otherwise)
    assert parse(unreadable)[0] == {key("jobq_up"): 0.0}
    samples, types = parse(body)
    assert content_type == CONTENT_TYPE_LATEST
    assert jobq_series(samples) == from_stats(conn)[0]
    assert samples[key("jobq_jobs", queue="d1", state="ready")] == 2.0
    assert samples[key("jobq_completed_total", queue="d2")] == 1.0
    assert samples[key("jobq_up")] == 1.0 and types["jobq_completed"] == "counter"
