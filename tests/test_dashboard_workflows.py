"""The dashboard and jobq 0.6's workflows, over real HTTP on a real server:
waiting jobs in every count and as a filter, a job's result (escaped JSON),
the ancestor that cancelled it as a link, and its parents and children with
their states (from jobq.job_dependencies, which a jobq_viewer login reads).
"""

from __future__ import annotations

import json
import re
import secrets
from html import unescape
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from pyqueue.dashboard.reads import RELATIVES_SHOWN
from tests.dashboard_http_support import SCRIPT_PAYLOAD, Response, claim, dashboard, enqueue

Connection = psycopg.Connection[tuple[Any, ...]]
RESULT = {"rows": 3, "note": SCRIPT_PAYLOAD["x"], "files": ["a.csv", "b.csv"]}
MEMBERS = RELATIVES_SHOWN + 20  # a callback with more parents than a job page lists


def complete(conn: Connection, queue: str, job_id: int, result: Any) -> None:
    [(claimed, token)] = claim(conn, queue, 1, "w-flow")
    assert claimed == job_id
    row = conn.execute("SELECT jobq.complete(%s, %s::uuid, %s::jsonb)",
                       (job_id, token, json.dumps(result))).fetchone()
    assert row == (True,)


def workflow(conn: Connection) -> dict[str, int]:
    """extract (completed with RESULT) and pending (ready) are the parents of
    transform (waiting, queue load); a second child of pending waits too;
    broken dies, so its child and grandchild are cancelled by it; a batch of
    MEMBERS jobs has a callback."""
    ids = {"extract": enqueue(conn, "etl", {"step": "extract"})}
    complete(conn, "etl", ids["extract"], RESULT)
    ids["pending"] = enqueue(conn, "etl", {"step": "pending"})
    ids["transform"] = enqueue(conn, "load", {"step": "transform"},
                               depends_on=[ids["extract"], ids["pending"]])
    ids["sibling"] = enqueue(conn, "load", {"step": "sibling"}, depends_on=[ids["pending"]])
    ids["broken"] = enqueue(conn, "fragile", {"step": "broken"}, max_attempts=1)
    [(job_id, token)] = claim(conn, "fragile", 1, "w-flow")
    conn.execute("SELECT jobq.fail(%s, %s, %s::uuid, now())", (job_id, "boom", token))
    ids["child"] = enqueue(conn, "load", {"step": "child"}, depends_on=[ids["broken"]])
    ids["grandchild"] = enqueue(conn, "load", {"step": "grandchild"}, depends_on=[ids["child"]])
    row = conn.execute(
        "SELECT jobq.enqueue_callback('publish', '{\"album\": 7}', ARRAY(SELECT jobq.enqueue_many("
        "'resize', array_fill('{}'::jsonb, ARRAY[%s]))))", (MEMBERS,)).fetchone()
    assert row is not None
    ids["callback"] = int(row[0])
    return ids


def relatives(page: Response, table: str) -> dict[int, tuple[str, str]]:
    """The rows of a job page's parents or children table: id -> (queue, state)."""
    found = re.search(rf"<table id=\"{table}\"[^>]*>(.*?)</table>", page.body, re.S)
    assert found, f"no {table} table"
    rows = re.findall(r"<tr data-job-id=\"(\d+)\"", found.group(1))
    return {int(job_id): (page.cell(f'data-job-id="{job_id}"', "queue"),
                          page.cell(f'data-job-id="{job_id}"', "status")) for job_id in rows}


def test_waiting_jobs_show_in_the_counts_and_filter(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = workflow(conn)
    waiting = {int(r[0]) for r in conn.execute(
        "SELECT id FROM jobq.jobs WHERE queue = 'load' AND status = 'waiting'").fetchall()}
    assert waiting == {ids["transform"], ids["sibling"]}
    stats = {str(r[0]): int(r[1]) for r in conn.execute("SELECT queue, waiting FROM jobq.stats").fetchall()}
    assert stats["load"] == 2 and stats["publish"] == 1
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        overview = client.get("/")
        queue = client.get("/queues/load")
        filtered = client.get("/queues/load?state=waiting")
    assert overview.status == queue.status == filtered.status == 200
    for name, count in stats.items():
        assert overview.cell(f'data-queue="{name}"', "waiting") == str(count), name
    assert re.search(r"<dd class=\"waiting\">2</dd>", queue.body)
    assert set(filtered.job_ids()) == waiting
    assert '<option value="waiting" selected>' in filtered.body
    assert all(filtered.cell(f'data-job-id="{job_id}"', "status") == "waiting" for job_id in waiting)


def test_job_page_shows_result_cancelled_by_and_relatives(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = workflow(conn)
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        extract = client.get(f"/jobs/{ids['extract']}")
        transform = client.get(f"/jobs/{ids['transform']}")
        grandchild = client.get(f"/jobs/{ids['grandchild']}")
        callback = client.get(f"/jobs/{ids['callback']}")
    assert {extract.status, transform.status, grandchild.status, callback.status} == {200}

    result = re.search(r"<pre id=\"result\">(.*?)</pre>", extract.body, re.S)
    assert result and "&lt;script&gt;alert(1)&lt;/script&gt;" in result.group(1)
    assert "<script>alert(1)" not in extract.body
    assert json.loads(unescape(result.group(1))) == RESULT
    assert relatives(extract, "children") == {ids["transform"]: ("load", "waiting")}
    assert 'id="no-parents"' in extract.body

    assert relatives(transform, "parents") == {ids["extract"]: ("etl", "completed"),
                                               ids["pending"]: ("etl", "ready")}
    assert 'id="no-result"' in transform.body and 'id="result"' not in transform.body
    assert re.search(r"<span class=\"badge state-waiting\" id=\"status\">waiting</span>", transform.body)
    actions = re.search(r"<div class=\"actions\" id=\"job-actions\">(.*?)</div>", transform.body, re.S)
    assert actions and ">Cancel</button>" in actions.group(1) and ">Retry</button>" not in actions.group(1)

    link = f'<dd id="cancelled-by"><a href="/jobs/{ids["broken"]}">job {ids["broken"]}</a></dd>'
    assert link in grandchild.body
    assert relatives(grandchild, "parents") == {ids["child"]: ("load", "cancelled")}

    shown = relatives(callback, "parents")
    assert len(shown) == RELATIVES_SHOWN and all(state == ("resize", "ready") for state in shown.values())
    assert f"<h2>Parents ({MEMBERS})</h2>" in callback.body
    assert f"The first {RELATIVES_SHOWN} of {MEMBERS} by id." in callback.body
    first = conn.execute("SELECT parent_id FROM jobq.job_dependencies WHERE child_id = %s "
                         "ORDER BY parent_id LIMIT %s", (ids["callback"], RELATIVES_SHOWN)).fetchall()
    assert list(shown) == [int(r[0]) for r in first]


def test_a_jobq_viewer_login_reads_the_relatives(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = workflow(conn)
    role = f"dashboard_viewer_{secrets.token_hex(4)}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        conn.execute(f"GRANT jobq_viewer TO {role}")
        with dashboard(make_conninfo(dsn, user=role), tmp_path, "--read-only") as served:
            page = served.client().get(f"/jobs/{ids['transform']}")
        assert page.status == 200, page.body[-600:]
        assert set(relatives(page, "parents")) == {ids["extract"], ids["pending"]}
    finally:
        conn.execute(f"DROP ROLE {role}")
