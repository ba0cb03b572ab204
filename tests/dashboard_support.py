"""What the dashboard's browser tests share: a real ``pyqueue dashboard``
process, a headless Debian Chromium driven by Selenium, and jobs put into
the database through jobq's own functions.

Chromium runs as the test user (postgres) with its profile in a temporary
directory; Selenium is pointed at /usr/bin/chromedriver and the chromium
binary, so Selenium Manager never looks for a driver on the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.ports import free_port, listens

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
VIEWPORT = (1280, 800)  # the screenshots' size, in CSS pixels at scale 1
START_TIMEOUT = 30.0  # seconds for a dashboard process to listen
WAIT = 20.0  # seconds a browser wait may take (generous: two shared cores)
TOKEN = "browser-test-token-0123456789"  # at least 16 characters

Conn = psycopg.Connection[tuple[Any, ...]]


def browser(profile: Path) -> WebDriver:
    """A headless Chromium whose viewport is exactly VIEWPORT."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--user-data-dir={profile}", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
                     "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    metrics = {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    driver.set_page_load_timeout(WAIT * 2)
    return driver


def wait(driver: WebDriver, timeout: float = WAIT) -> WebDriverWait[WebDriver]:
    """A wait that tries again when the page's refresh replaced an element it was reading."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=[StaleElementReferenceException])


def dashboard_argv(dsn: str, port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pyqueue", "dashboard", "--dsn", dsn, "--port", str(port),
            "--log-level", "warning", *extra]


def dashboard_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYQUEUE_DASHBOARD_TOKEN"}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT), **extra}


@dataclass
class Dashboard:
    """A running ``pyqueue dashboard`` process."""

    process: subprocess.Popen[str]
    port: int
    log: Path
    options: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def running_dashboard(dsn: str, scratch: Path, *options: str, host: str = "127.0.0.1",
                      env: dict[str, str] | None = None) -> Iterator[Dashboard]:
    """``pyqueue dashboard --dsn DSN --port FREE OPTIONS…``, listening; SIGTERM afterwards."""
    port = free_port()
    log = scratch / f"dashboard-{port}.log"
    argv = dashboard_argv(dsn, port, "--host", host, *options)
    with log.open("w") as out:
        process = subprocess.Popen(argv, cwd=ROOT, env=env or dashboard_env(), stdout=out,
                                   stderr=subprocess.STDOUT, text=True)
    dashboard = Dashboard(process, port, log, list(options))
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert process.poll() is None, f"dashboard exited ({process.returncode}):\n{dashboard.output()}"
            if listens(process.pid, port):
                break
            assert time.monotonic() < deadline, f"the dashboard never listened:\n{dashboard.output()}"
            time.sleep(0.1)
        yield dashboard
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def shows(selector: str) -> Callable[[WebDriver], bool]:
    """A wait condition: the page has an element matching selector."""
    return lambda d: bool(d.find_elements(By.CSS_SELECTOR, selector))


def submit(driver: WebDriver, action_suffix: str) -> str:
    """Click the submit button of the page's form posting to …action_suffix
    (accepting its confirmation, if it asks); the flash message shown after."""
    form = driver.find_element(By.CSS_SELECTOR, f'form[action$="{action_suffix}"]')
    form.find_element(By.CSS_SELECTOR, "button, input[type=submit]").click()
    with contextlib.suppress(TimeoutException):
        wait(driver, 2).until(EC.alert_is_present()).accept()
    wait(driver).until(EC.staleness_of(form))
    flash = wait(driver).until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#flash")))
    return str(flash.text)


# --- the database, through jobq's functions ------------------------------------------------

def enqueue(conn: Conn, queue: str, payload: dict[str, Any], **options: Any) -> int:
    names = ", ".join(f"{name} => %({name})s" for name in options)
    row = conn.execute(f"SELECT jobq.enqueue(%(queue)s, %(payload)s::jsonb{', ' + names if names else ''})",
                       {"queue": queue, "payload": json.dumps(payload), **options}).fetchone()
    assert row is not None
    return int(row[0])


def claim(conn: Conn, queue: str, worker: str = "worker-1@app") -> tuple[int, str]:
    row = conn.execute("SELECT id, lease_token::text FROM jobq.claim(%s, 1, %s)", (queue, worker)).fetchone()
    assert row is not None, f"nothing to claim on {queue}"
    return int(row[0]), str(row[1])


def make_dead(conn: Conn, queue: str, payload: dict[str, Any], error: str, *, key: str | None = None) -> int:
    """A job that failed its only attempt: dead, with error as its last error."""
    job = enqueue(conn, queue, payload, max_attempts=1, job_key=key)
    claimed, token = claim(conn, queue)
    assert claimed == job
    conn.execute("SELECT jobq.fail(%s, %s, %s::uuid)", (job, error, token))
    return job


def make_completed(conn: Conn, queue: str, n: int) -> None:
    for i in range(n):
        enqueue(conn, queue, {"n": i})
        job, token = claim(conn, queue)
        conn.execute("SELECT jobq.complete(%s, %s::uuid)", (job, token))


def status(conn: Conn, job: int) -> str:
    row = conn.execute("SELECT status FROM jobq.jobs WHERE id = %s", (job,)).fetchone()
    assert row is not None, f"job {job} is gone"
    return str(row[0])


def stats(conn: Conn, queue: str) -> dict[str, Any]:
    """jobq.stats' row of one queue, by column name."""
    cursor = conn.execute("SELECT * FROM jobq.stats WHERE queue = %s", (queue,))
    row = cursor.fetchone()
    assert row is not None and cursor.description is not None, f"no stats row for {queue}"
    return {column.name: value for column, value in zip(cursor.description, row, strict=True)}


def realistic_dataset(conn: Conn) -> dict[str, int]:
    """A small day of work for the screenshots and the overview: four queues
    with ready, scheduled, running, completed and dead jobs, failed attempts
    with tracebacks, two schedules, one paused queue, one with limits. The
    ids worth opening, by name."""
    conn.execute("SELECT jobq.configure_queue('webhooks', concurrency => 8, rate_limit => 100, "
                 "rate_interval => '1 minute')")
    for queue, done in (("emails", 23), ("billing.invoices", 9), ("reports", 4), ("webhooks", 14)):
        make_completed(conn, queue, done)
    traceback = ("Traceback (most recent call last):\n  File \"app/mail.py\", line 41, in send\n"
                 "    smtp.send_message(message)\nTimeoutError: SMTP server did not answer within 30 s")
    dead = make_dead(conn, "emails", {"to": "ana@example.com", "template": "welcome", "user_id": 4182},
                     traceback, key="welcome:4182")
    make_dead(conn, "webhooks", {"url": "https://hooks.example.com/orders", "event": "order.paid"},
              "HTTPError: 503 Service Unavailable")
    for i in range(12):
        enqueue(conn, "emails", {"to": f"user{i}@example.com", "template": "digest"}, job_key=f"digest:{i}")
    for i in range(5):
        enqueue(conn, "billing.invoices", {"invoice": 9100 + i, "amount_cents": 1250 * (i + 1)},
                run_at=datetime.now(timezone.utc) + timedelta(hours=i + 1))
    enqueue(conn, "reports", {"report": "weekly-sales", "format": "pdf"})
    running, token = claim(conn, "emails", "worker-7@app-2")
    conn.execute("SELECT jobq.heartbeat(%s, %s::uuid)", (running, token))
    claim(conn, "reports", "worker-3@app-1")
    for i in range(3):
        enqueue(conn, "webhooks", {"url": "https://hooks.example.com/orders", "event": f"order.{i}"})
    conn.execute("SELECT jobq.pause('reports')")
    conn.execute("SELECT jobq.every('nightly-report', '0 3 * * *', 'reports', "
                 "'{\"report\": \"daily\"}'::jsonb, runner => 'workers')")
    conn.execute("SELECT jobq.every('invoice-run', '*/30 * * * *', 'billing.invoices', runner => 'workers')")
    return {"dead": dead, "running": running}


def past_hour(conn: Conn) -> None:
    """Fifty-nine earlier minutes of completions and failures in jobq's
    per-minute counters (written directly, as the superuser: the pictures
    cannot wait an hour for real traffic)."""
    conn.execute("""
        INSERT INTO jobq._counter (queue, bucket, completed, failed, dead)
        SELECT q, date_trunc('minute', now()) - m * interval '1 minute',
               20 + (m * 7 + length(q) * 3) % 25 + CASE WHEN m BETWEEN 20 AND 30 THEN 30 ELSE 0 END,
               CASE WHEN m % 9 = length(q) % 9 THEN 1 + m % 4 ELSE 0 END, 0
        FROM unnest(ARRAY['emails', 'billing.invoices', 'reports', 'webhooks']) AS q,
             generate_series(1, 59) AS m""")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk; AssertionError when it is no PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)
