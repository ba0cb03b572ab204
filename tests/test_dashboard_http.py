"""The dashboard's pages over real HTTP: a real ``pyqueue dashboard`` process
on a real server, read with http.client. Counts equal what jobq's views
hold, paging is by id, bad URLs get 400/404 pages (never a traceback), and
everything from the database is escaped text under a strict CSP.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from pathlib import Path
from typing import Any

import psycopg

from tests.dashboard_http_support import (
    SCRIPT_PAYLOAD,
    Response,
    claim,
    dashboard,
    enqueue,
    seed,
    serving,
)
from tests.ports import free_port

Connection = psycopg.Connection[tuple[Any, ...]]
MOUNTED = '''
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from pyqueue.dashboard import create_app


async def home(request):
    return PlainTextResponse("the host app")


app = Starlette(routes=[Route("/", home), Mount("/ops/jobq", app=create_app(sys.argv[1]))])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
'''


def assert_safe_page(page: Response) -> None:
    """No unescaped data, no inline script, and the security headers."""
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script>alert(1)" not in page.body and "<img src=x" not in page.body
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page.body), "inline <script> element"
    assert not re.search(r"<[^>]+\son[a-z]+\s*=", page.body), "inline event handler"


def test_overview_counts_equal_the_database(conn: Connection, dsn: str, tmp_path: Path) -> None:
    seed(conn)
    stats = {row[0]: row for row in conn.execute(
        "SELECT queue, ready, scheduled, running, dead, paused FROM jobq.stats").fetchall()}
    hour = {row[0]: (int(row[1]), int(row[2])) for row in conn.execute(
        "SELECT queue, sum(completed), sum(failed) FROM jobq.throughput GROUP BY queue").fetchall()}
    assert set(stats) == {"emails", "reports", "idle"} and stats["emails"][1:4] == (2, 1, 1)
    with dashboard(dsn, tmp_path) as served:
        page = served.client().get("/")
    assert page.status == 200
    assert_safe_page(page)
    assert re.findall(r"<tr data-queue=\"([^\"]+)\"", page.body) == sorted(stats)
    for queue, (_, ready, scheduled, running, dead, paused) in stats.items():
        row = f'data-queue="{queue}"'
        assert [page.cell(row, name) for name in ("ready", "scheduled", "running", "dead")] == [
            str(ready), str(scheduled), str(running), str(dead)], queue
        assert page.cell(row, "paused") == ("paused" if paused else "no")
        completed, failed = hour.get(queue, (0, 0))
        shown = (page.cell(row, "completed-hour"), page.cell(row, "failed-hour"))
        assert shown == (str(completed), str(failed)), queue
    assert page.cell('data-queue="emails"', "limits") == "concurrency 5 · 100 per 1m"
    assert page.cell('data-queue="reports"', "dead") == "1" and hour["reports"] == (0, 2)
    chart = re.search(r"<svg id=\"throughput\"[^>]*data-completed=\"(\d+)\" data-failed=\"(\d+)\"", page.body)
    assert chart and (int(chart.group(1)), int(chart.group(2))) == (
        sum(c for c, _ in hour.values()), sum(f for _, f in hour.values()))
    assert len(re.findall(r"<g class=\"minute\"", page.body)) == 60  # every minute of the hour, gaps as 0


def test_an_estimated_count_is_marked_as_one(conn: Connection, dsn: str, tmp_path: Path) -> None:
    """Over 10,000 jobs of a queue, jobq.stats estimates (jobq 0.9): the
    overview and the queue's page show those counts with ≈; exact ones bare."""
    conn.execute("SELECT count(*) FROM jobq.enqueue_many('big', ARRAY(SELECT '{}'::jsonb "
                 "FROM generate_series(1, 12000)))")
    enqueue(conn, "small", {})
    rows = {row[0]: row[1:] for row in conn.execute("SELECT queue, ready, estimated FROM jobq.stats")}
    assert rows["big"][1] is True and rows["small"] == (1, False)
    with dashboard(dsn, tmp_path) as served:
        page = served.client().get("/")
        queue_page = served.client().get("/queues/big")
    assert page.status == 200 and queue_page.status == 200
    assert page.cell('data-queue="big"', "ready") == f"≈{rows['big'][0]}"
    assert page.cell('data-queue="big"', "running") == "0"  # always exact
    assert page.cell('data-queue="small"', "ready") == "1"
    assert re.search(r'<dd class="ready"><span class="estimate"[^>]*>≈\d+</span></dd>', queue_page.body)


def test_queue_page_filters_and_pages_by_id(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    many = [enqueue(conn, "bulk", {"i": i}) for i in range(120)]
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        emails = client.get("/queues/emails")
        assert emails.status == 200
        assert emails.job_ids() == [row[0] for row in conn.execute(
            "SELECT id FROM jobq.jobs WHERE queue = 'emails' ORDER BY id DESC").fetchall()]
        assert re.search(r"<dd class=\"ready\">2</dd>", emails.body)
        assert "a id=\"next-page\"" not in emails.body
        assert client.get("/queues/emails?state=scheduled").job_ids() == [ids["scheduled"]]
        assert client.get("/queues/emails?state=completed").job_ids() == [ids["e1"]]
        assert client.get("/queues/emails?key=key-3").job_ids() == [ids["e3"]]
        assert client.get("/queues/emails?key=key-%25").job_ids() == []  # exact key, no wildcard
        reports = client.get("/queues/reports?error=onerror%3Dalert")
        assert reports.job_ids() == [ids["dead"]]
        assert_safe_page(reports)
        assert client.get("/queues/reports?error=nothing+like+this").job_ids() == []
        assert client.get("/queues/reports?error=%25").job_ids() == []  # % is literal text
        seen, path, pages = [], "/queues/bulk", 0
        while path:
            page = client.get(unescape(path))
            assert page.status == 200
            seen += page.job_ids()
            pages += 1
            assert len(page.job_ids()) == (50 if pages < 3 else 20)
            assert all(f'name="ids" value="{job_id}"' in page.body for job_id in page.job_ids())
            found = re.search(r"<a id=\"next-page\" href=\"([^\"]+)\"", page.body)
            path = found.group(1) if found else ""
            assert not found or f"before={seen[-1]}" in path
        assert seen == sorted(many, reverse=True) and pages == 3
        assert client.get(f"/queues/bulk?before={many[10]}").job_ids() == sorted(many[:10], reverse=True)


def test_an_error_search_reads_a_bounded_window_then_goes_on_below_it(
    conn: Connection, dsn: str, tmp_path: Path
) -> None:
    # The oldest job of the queue carries the error; 20,010 newer ones do not.
    failing = enqueue(conn, "search", {"i": "old"})
    [(job_id, token)] = claim(conn, "search", 1, "w")
    assert job_id == failing
    failed = conn.execute("SELECT jobq.fail(%s, 'needle: SMTP 451', %s::uuid)", (failing, token)).fetchone()
    assert failed == (True,)
    conn.execute("SELECT jobq.enqueue_many('search', array_fill('{}'::jsonb, ARRAY[20010]))")
    window = 20_000
    floor = conn.execute("SELECT id FROM jobq.jobs WHERE queue = 'search' ORDER BY id DESC OFFSET %s LIMIT 1",
                         (window,)).fetchone()
    assert floor is not None and floor[0] > failing
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        first = client.get("/queues/search?error=needle")
        assert first.status == 200 and first.job_ids() == []
        assert 'id="search-window"' in first.body and f"down to job {floor[0] + 1}" in first.body
        found = re.search(r"<a id=\"next-page\" href=\"([^\"]+)\"", first.body)
        assert found and f"before={floor[0] + 1}" in unescape(found.group(1))
        second = client.get(unescape(found.group(1)))
        assert second.job_ids() == [failing]
        assert 'id="search-window"' not in second.body and 'id="next-page"' not in second.body
        # without an error filter there is no window: a plain page is a plain keyset page
        assert 'id="search-window"' not in client.get("/queues/search").body


def test_job_page_shows_everything_escaped(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    errors = conn.execute("SELECT attempt, error FROM jobq.job_errors WHERE job_id = %s ORDER BY attempt",
                          (ids["dead"],)).fetchall()
    assert len(errors) == 2
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        page = client.get(f"/jobs/{ids['dead']}")
        running = client.get(f"/jobs/{ids['e2']}")
    assert page.status == 200
    assert_safe_page(page)
    payload = re.search(r"<pre id=\"payload\">(.*?)</pre>", page.body, re.S)
    assert payload and "&lt;script&gt;alert(1)&lt;/script&gt;" in payload.group(1)
    assert json.loads(unescape(payload.group(1))) == SCRIPT_PAYLOAD
    article = r"<article class=\"job-error\" data-attempt=\"(\d+)\">.*?<pre>(.*?)</pre>"
    shown = re.findall(article, page.body, re.S)
    assert [(int(attempt), unescape(text)) for attempt, text in shown] == [(a, e) for a, e in errors]
    assert re.search(r"<dd id=\"attempts\">2/2</dd>", page.body)
    assert "<dd id=\"job-key\">&lt;b&gt;key&lt;/b&gt;</dd>" in page.body
    assert re.search(r"<span class=\"badge state-dead\" id=\"status\">dead</span>", page.body)
    assert re.search(r"<dd id=\"finished-at\">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</dd>", page.body)
    assert "<dd id=\"worker\">w-2</dd>" in page.body
    assert running.status == 200 and "<dd id=\"worker\">w-1</dd>" in running.body
    assert re.search(r"<dd id=\"lease-expires-at\">\d{4}-", running.body)
    assert re.search(r"<dd id=\"started-at\">\d{4}-", running.body)


def test_schedules_and_workers_pages(conn: Connection, dsn: str, tmp_path: Path) -> None:
    seed(conn)
    claim(conn, "emails", 1, "w-3")
    workers = conn.execute("SELECT worker, jobs FROM jobq.workers ORDER BY worker").fetchall()
    assert workers == [("w-1", 1), ("w-3", 1)]
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        schedules, workers_page = client.get("/schedules"), client.get("/workers")
    assert schedules.status == workers_page.status == 200
    assert "<table id=\"schedules\">" in schedules.body
    assert schedules.cell('data-schedule="nightly"', "schedule") == "0 3 * * *"
    assert schedules.cell('data-schedule="nightly"', "runner") == "workers"
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00 UTC", schedules.cell('data-schedule="nightly"', "next-run"))
    assert "<table id=\"workers\">" in workers_page.body
    assert re.findall(r"<tr data-worker=\"([^\"]+)\"", workers_page.body) == ["w-1", "w-3"]
    assert workers_page.cell('data-worker="w-1"', "jobs") == "1"
    assert workers_page.cell('data-worker="w-1"', "queues") == "emails"


def test_bad_urls_get_error_pages_never_a_traceback(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    expected = {
        "/jobs/999999999": 404, "/jobs/abc": 400, "/jobs/-1": 400, "/jobs/0": 400,
        "/jobs/99999999999999999999": 400, "/queues/nowhere": 404, "/queues/bad%20name": 400,
        "/queues/%3Cscript%3E": 400, "/queues/emails?state=bogus": 400, "/queues/emails?before=x": 400,
        "/queues/emails?before=1e3": 400, "/queues/emails?page=2": 400,
        f"/queues/emails?key={'k' * 1001}": 400,
        "/no/such/page": 404, f"/jobs/{ids['e1']}/retry": 405,
    }
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        for path, status in expected.items():
            page = client.get(path)
            assert page.status == status, (path, page.status, page.body[:300])
            assert "<section id=\"error\"" in page.body and "Traceback" not in page.body, path
            assert page.headers["x-content-type-options"] == "nosniff", path
            assert "script-src 'self'" in page.headers["content-security-policy"], path
        assert "no job 999999999" in client.get("/jobs/999999999").body
        assert "&lt;script&gt;" in client.get("/queues/%3Cscript%3E").body
    assert "Traceback" not in served.log.read_text()


def test_mounted_in_another_app_under_a_prefix(conn: Connection, dsn: str, tmp_path: Path) -> None:
    """create_app() mounted in a user's Starlette app: links, assets, forms
    and redirects stay under the prefix, and the pool opens on first use."""
    ids = seed(conn)
    port = free_port()
    argv = [sys.executable, "-c", textwrap.dedent(MOUNTED), dsn, str(port)]
    with serving(argv, port, tmp_path) as served:
        client = served.client()
        assert client.get("/").body == "the host app"
        page = client.get("/ops/jobq/")
        assert page.status == 200 and 'href="/ops/jobq/queues/emails"' in page.body
        assert '<link rel="stylesheet" href="/ops/jobq/static/dashboard.css">' in page.body
        assert client.get("/ops/jobq/static/dashboard.js").status == 200
        assert f'href="/ops/jobq/jobs/{ids["e3"]}"' in client.get("/ops/jobq/queues/emails").body
        posted = client.post("/ops/jobq/queues/emails/pause", [], token_from="/ops/jobq/queues/emails")
        assert posted.status == 303 and posted.headers["location"] == "/ops/jobq/queues/emails"
        assert client.get(posted.headers["location"]).flash == "queue emails paused"
        assert client.get("/ops/jobq/jobs/abc").status == 400
    assert conn.execute("SELECT paused FROM jobq.stats WHERE queue = 'emails'").fetchone() == (True,)


def test_a_lost_database_connection_is_a_503_page_then_it_recovers(
        conn: Connection, dsn: str, tmp_path: Path) -> None:
    seed(conn)
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        # Concurrent pages make the pool hold several connections: a restarted
        # server breaks every one of them, not only the next to be used.
        with ThreadPoolExecutor(8) as pages:
            assert set(pages.map(lambda _: served.client().get("/").status, range(16))) == {200}
        killed = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE application_name = 'pyqueue-dashboard' AND datname = current_database()"
                              ).fetchone()
        assert killed is not None and killed[0] >= 2
        page = client.get("/queues/emails")
        assert page.status == 503 and '<section id="error" data-status="503">' in page.body
        assert "cannot reach PostgreSQL" in page.body and "Traceback" not in page.body
        assert "script-src 'self'" in page.headers["content-security-policy"]
        # The pool tested its idle connections after the failure and replaced the broken ones.
        assert [client.get("/queues/emails").status for _ in range(4)] == [200] * 4
    assert "database unavailable for GET /queues/emails" in served.log.read_text()
