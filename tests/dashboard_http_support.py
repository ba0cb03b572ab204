"""What the dashboard's HTTP tests share: a real ``pyqueue dashboard``
process on a free loopback port, and a small HTTP client (http.client) that
keeps cookies, never follows redirects by itself, and reads the CSRF token
and the flash message out of the pages.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from html import unescape
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import ROOT
from tests.ports import free_port, listens

START_TIMEOUT = 30.0  # seconds a dashboard process may take to listen
STOP_TIMEOUT = 20.0
REQUEST_TIMEOUT = 30.0
TOKEN_ENV = "PYQUEUE_DASHBOARD_TOKEN"
SECRET_ENV = "PYQUEUE_DASHBOARD_SECRET"
SCRIPT_PAYLOAD = {"x": "<script>alert(1)</script>"}
ERROR_TEXT = ('Traceback (most recent call last):\n  File "jobs.py", line 3\n'
              "ValueError: <img src=x onerror=alert(1)>")
Connection = psycopg.Connection[tuple[Any, ...]]


def dashboard_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in (TOKEN_ENV, SECRET_ENV)}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT), **extra}


def run_command(*args: str, env: dict[str, str] | None = None, stdin: str = "",
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m pyqueue ARGS`` to completion."""
    return subprocess.run([sys.executable, "-m", "pyqueue", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=timeout, env=env or dashboard_env(),
                          check=False)


def claim(conn: Connection, queue: str, n: int, worker: str) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT id, lease_token::text FROM jobq.claim(%s, %s, %s)",
                        (queue, n, worker)).fetchall()
    return [(int(row[0]), str(row[1])) for row in rows]


def enqueue(conn: Connection, queue: str, payload: dict[str, Any], **options: Any) -> int:
    named = "".join(f", {name} => %({name})s" for name in options)
    row = conn.execute(f"SELECT jobq.enqueue(%(queue)s, %(payload)s::jsonb{named})".encode(),
                       {"queue": queue, "payload": json.dumps(payload), **options}).fetchone()
    assert row is not None
    return int(row[0])


def seed(conn: Connection) -> dict[str, int]:
    """Queues in every state: emails (limits; ready, scheduled, running,
    completed), reports (a dead job with two recorded errors, a <script>
    payload), idle (paused); a worker-run schedule."""
    conn.execute("SELECT jobq.configure_queue('emails', concurrency => 5, rate_limit => 100, "
                 "rate_interval => '1 minute', retention => '1 hour')")
    ids = {f"e{n}": enqueue(conn, "emails", {"n": n}, job_key=f"key-{n}") for n in range(1, 5)}
    in_two_days = datetime.now(timezone.utc) + timedelta(days=2)
    ids["scheduled"] = enqueue(conn, "emails", {"later": True}, run_at=in_two_days)
    (first, first_token), _ = claim(conn, "emails", 2, "w-1")
    conn.execute("SELECT jobq.complete(%s, %s::uuid)", (first, first_token))
    ids["dead"] = enqueue(conn, "reports", SCRIPT_PAYLOAD, max_attempts=2, job_key="<b>key</b>")
    for attempt in (1, 2):
        [(job_id, token)] = claim(conn, "reports", 1, "w-2")
        assert job_id == ids["dead"]
        conn.execute("SELECT jobq.fail(%s, %s, %s::uuid, now())",
                     (job_id, f"{ERROR_TEXT} #{attempt}", token))
    conn.execute("SELECT jobq.pause('idle')")
    conn.execute("SELECT jobq.every('nightly', '0 3 * * *', 'reports', '{\"kind\": \"nightly\"}'::jsonb, "
                 "runner => 'workers')")
    return ids


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: str
    cookies: list[str] = field(default_factory=list)  # the raw Set-Cookie headers

    @property
    def main(self) -> str:
        """The <main> element's HTML."""
        found = re.search(r"<main id=\"main\">(.*)</main>", self.body, re.S)
        return found.group(1) if found else ""

    @property
    def flash(self) -> str:
        found = re.search(r"<div id=\"flash\"[^>]*>(.*?)</div>", self.body, re.S)
        return unescape(found.group(1)).strip() if found else ""

    @property
    def csrf_token(self) -> str:
        found = re.search(r"<meta name=\"csrf-token\" content=\"([^\"]+)\"", self.body)
        assert found, "the page has no CSRF token"
        return unescape(found.group(1))

    def cell(self, row: str, css_class: str) -> str:
        """The text of the first element with css_class inside the <tr …row…> element."""
        found = re.search(rf"<tr {re.escape(row)}[^>]*>(.*?)</tr>", self.body, re.S)
        assert found, f"no row {row}"
        cell = rf"class=\"[^\"]*\b{re.escape(css_class)}\b[^\"]*\">(.*?)</t[dh]>"
        value = re.search(cell, found.group(1), re.S)
        assert value, f"row {row} has no cell {css_class}"
        return unescape(re.sub(r"<[^>]+>", "", value.group(1))).strip()

    def job_ids(self) -> list[int]:
        return [int(found) for found in re.findall(r"<tr data-job-id=\"(\d+)\"", self.body)]


class Client:
    """An HTTP client of one dashboard, with its own cookie jar."""

    def __init__(self, port: int, *, headers: dict[str, str] | None = None) -> None:
        self.port = port
        self.headers = headers or {}
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, *, fields: list[tuple[str, str]] | None = None,
                headers: dict[str, str] | None = None) -> Response:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT)
        sent = {"Accept": "text/html", **self.headers, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        body = None
        if fields is not None:
            body = urllib.parse.urlencode(fields)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            connection.request(method, path, body=body, headers=sent)
            raw = connection.getresponse()
            text = raw.read().decode()
            set_cookies = raw.headers.get_all("set-cookie") or []
            response = Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, text, set_cookies)
        finally:
            connection.close()
        for cookie in set_cookies:
            name, _, rest = cookie.partition("=")
            value = rest.split(";")[0]
            if "max-age=0" in cookie.lower() or not value.strip('"'):
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        return response

    def get(self, path: str, *, headers: dict[str, str] | None = None) -> Response:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, fields: list[tuple[str, str]], *, token_from: str | None = None) -> Response:
        """POST fields; with token_from, first GET that page and send its CSRF token."""
        if token_from is not None:
            fields = [("csrf_token", self.get(token_from).csrf_token), *fields]
        return self.request("POST", path, fields=fields)

    def act(self, page: str, action: str, fields: list[tuple[str, str]] | None = None) -> Response:
        """Submit an action form as a browser does: the page's token, the POST,
        then the page the 303 sends back to (with the flash message)."""
        posted = self.post(action, fields or [], token_from=page)
        assert posted.status == 303, (posted.status, posted.body[:500])
        return self.get(posted.headers["location"])


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@dataclass
class Dashboard:
    """A running ``pyqueue dashboard`` process."""

    process: subprocess.Popen[str]
    port: int
    log: Path

    def client(self, *, headers: dict[str, str] | None = None) -> Client:
        return Client(self.port, headers=headers)


def wait_listening(process: subprocess.Popen[str], port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the dashboard exited with {process.returncode}:\n{log.read_text()}")
        if listens(process.pid, port):
            return
        time.sleep(0.1)
    raise AssertionError(f"the dashboard did not listen within {START_TIMEOUT} s:\n{log.read_text()}")


def dashboard(dsn: str, tmp_path: Path, *args: str,
              env: dict[str, str] | None = None) -> contextlib.AbstractContextManager[Dashboard]:
    """``pyqueue dashboard --dsn dsn ARGS`` on a free port, stopped by SIGTERM afterwards."""
    port = free_port()
    argv = [sys.executable, "-m", "pyqueue", "dashboard", "--dsn", dsn, "--port", str(port), *args]
    return serving(argv, port, tmp_path, env=env)


@contextlib.contextmanager
def serving(argv: list[str], port: int, tmp_path: Path, *,
            env: dict[str, str] | None = None) -> Iterator[Dashboard]:
    """The process argv, once it listens on port; stopped by SIGTERM afterwards."""
    log = tmp_path / f"dashboard-{port}.log"
    with log.open("w") as output:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, text=True,
                                   env=env or dashboard_env())
    try:
        wait_listening(process, port, log)
        yield Dashboard(process, port, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert "Traceback" not in log.read_text(), log.read_text()
