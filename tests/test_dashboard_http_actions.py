"""The dashboard's actions over real HTTP: each form calls jobq's function
and the database changes as it says in #flash; a POST without this
browser's CSRF token, or any POST in read-only mode, is refused (403) and
changes nothing; jobq's own errors come back as a message, not a 500.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from tests.dashboard_http_support import Client, claim, dashboard, enqueue, seed

Connection = psycopg.Connection[tuple[Any, ...]]


def status(conn: Connection, job_id: int) -> str:
    row = conn.execute("SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    return str(row[0]) if row else "gone"


def paused(conn: Connection, queue: str) -> bool:
    row = conn.execute("SELECT paused FROM jobq.stats WHERE queue = %s", (queue,)).fetchone()
    return bool(row and row[0])


def make_dead(conn: Connection, queue: str, **options: Any) -> int:
    job_id = enqueue(conn, queue, {"dies": True}, max_attempts=1, **options)
    [(claimed, token)] = claim(conn, queue, 1, "w-dead")
    assert claimed == job_id
    conn.execute("SELECT jobq.fail(%s, 'boom', %s::uuid)", (job_id, token))
    assert status(conn, job_id) == "dead"
    return job_id


def snapshot(conn: Connection) -> list[tuple[Any, ...]]:
    """Every job's state and the queues' pause flags: what a refused POST must leave alone."""
    jobs = conn.execute("SELECT id, status, run_at, attempts FROM jobq.jobs ORDER BY id").fetchall()
    queues = conn.execute("SELECT queue, paused FROM jobq.stats ORDER BY queue").fetchall()
    return [*jobs, *queues]


def test_job_actions_change_the_job_and_say_so(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    dead, scheduled, ready = ids["dead"], ids["scheduled"], ids["e3"]
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        page = client.act(f"/jobs/{dead}", f"/jobs/{dead}/retry")
        assert page.flash == f"job {dead} retried" and status(conn, dead) == "ready"
        assert 'id="flash" role="status" class="ok"' in page.body
        running = ids["e2"]
        page = client.act(f"/jobs/{running}", f"/jobs/{running}/retry")
        assert page.flash == f"job {running} was running: nothing done" and status(conn, running) == "running"
        assert 'class="error"' in page.body
        page = client.act(f"/jobs/{scheduled}", f"/jobs/{scheduled}/run-now")
        assert page.flash == f"job {scheduled} set to run now" and status(conn, scheduled) == "ready"
        assert client.act(f"/jobs/{scheduled}", f"/jobs/{scheduled}/run-now").flash == (
            f"job {scheduled} was ready: nothing done")
        assert client.act(f"/jobs/{ready}", f"/jobs/{ready}/cancel").flash == f"job {ready} cancelled"
        assert status(conn, ready) == "cancelled"
        assert client.act(f"/jobs/{ready}", f"/jobs/{ready}/cancel").flash == (
            f"job {ready} was cancelled: nothing done")
        after = client.get(f"/jobs/{ready}")
        assert after.flash == ""  # a flash message is shown once
        assert f'action="/jobs/{ready}/retry"' in after.body and "/cancel" not in after.body


def test_a_running_job_shows_its_progress_and_can_be_cancelled(conn: Connection, dsn: str,
                                                               tmp_path: Path) -> None:
    """Issue 26: the job page of a running job shows the progress its worker
    reported and a Cancel form; cancelling it notifies the holder (NOTIFY
    jobq_cancel with the job's id and lease token). Read-only mode: below."""
    job_id = enqueue(conn, "crunch", {"rows": 1000})
    [(claimed, token)] = claim(conn, "crunch", 1, "w-crunch")
    assert claimed == job_id
    conn.execute("SELECT jobq.progress(%s, %s::uuid, %s::jsonb)",
                 (job_id, token, '{"done": 420, "of": 1000}'))
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("LISTEN jobq_cancel")
        with dashboard(dsn, tmp_path) as served:
            client = served.client()
            page = client.get(f"/jobs/{job_id}")
            assert re.search(r'<pre id="progress">[^<]*&#34;done&#34;: 420', page.body), page.body
            assert f'action="/jobs/{job_id}/cancel"' in page.body
            after = client.act(f"/jobs/{job_id}", f"/jobs/{job_id}/cancel")
            assert after.flash == f"job {job_id} cancelled" and status(conn, job_id) == "cancelled"
            assert f'action="/jobs/{job_id}/cancel"' not in after.body
        notes = [(n.channel, n.payload) for n in holder.notifies(timeout=5, stop_after=1)]
        assert notes == [("jobq_cancel", f"{job_id}:{token}")]


def test_queue_and_bulk_actions(conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    other = make_dead(conn, "reports")
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        assert client.act("/queues/emails", "/queues/emails/pause").flash == "queue emails paused"
        assert paused(conn, "emails")
        overview = client.get("/")
        assert overview.cell('data-queue="emails"', "paused") == "paused"
        assert client.act("/queues/emails", "/queues/emails/resume").flash == "queue emails resumed"
        assert not paused(conn, "emails")
        assert client.act("/queues/emails", "/queues/emails/resume").flash == (
            "queue emails was not paused: nothing done")
        assert client.act("/queues/reports", "/queues/reports/retry-dead").flash == (
            "queue reports: 2 dead jobs retried")
        assert {status(conn, ids["dead"]), status(conn, other)} == {"ready"}
        assert client.act("/queues/reports", "/queues/reports/retry-dead").flash == (
            "queue reports had no dead job: nothing done")
        fields = [("action", "cancel"), ("ids", str(ids["e3"])), ("ids", str(ids["e4"])), ("ids", str(other))]
        page = client.act("/queues/emails", "/queues/emails/bulk", fields)
        assert page.flash == f"2 of 3 jobs cancelled; nothing done for {other}"
        assert (status(conn, ids["e3"]), status(conn, ids["e4"]), status(conn, other)) == (
            "cancelled", "cancelled", "ready")  # a job of another queue is left alone
        fields = [("action", "retry"), ("ids", str(ids["e3"])), ("ids", str(ids["e4"]))]
        assert client.act("/queues/emails", "/queues/emails/bulk", fields).flash == "2 of 2 jobs retried"
        assert (status(conn, ids["e3"]), status(conn, ids["e4"])) == ("ready", "ready")
        assert client.act("/queues/emails", "/queues/emails/bulk", [("action", "retry")]).flash == (
            "no job selected: nothing done")
        before = snapshot(conn)
        for bad in ([("action", "retry"), ("ids", "12x")], [("action", "delete"), ("ids", str(ids["e3"]))]):
            refused = client.post("/queues/emails/bulk", bad, token_from="/queues/emails")
            assert refused.status == 400 and '<section id="error"' in refused.body
        assert client.post("/queues/nowhere/pause", [], token_from="/").status == 404
        assert snapshot(conn) == before


def test_jobq_errors_are_shown_not_a_500(conn: Connection, dsn: str, tmp_path: Path) -> None:
    dead = make_dead(conn, "keys", job_key="dup")
    enqueue(conn, "keys", {}, job_key="dup")  # an active job now holds the key: retry raises JQ013
    with dashboard(dsn, tmp_path) as served:
        page = served.client().act(f"/jobs/{dead}", f"/jobs/{dead}/retry")
    assert page.status == 200
    assert page.flash.startswith("refused by jobq (JQ013): ") and "dup" in page.flash
    assert status(conn, dead) == "dead"


def test_posts_without_this_browsers_csrf_token_change_nothing(
        conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    before = snapshot(conn)
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        token = client.get("/queues/emails").csrf_token  # the client now has its CSRF cookie
        nonce, _, mac = token.partition(".")
        stranger = served.client()
        stranger.get("/")  # a CSRF cookie of its own
        attempts: list[tuple[Client, list[tuple[str, str]]]] = [
            (client, []),  # no field
            (client, [("csrf_token", "")]),
            (client, [("csrf_token", f"{nonce}.{'0' * len(mac)}")]),  # signature forged
            (stranger, [("csrf_token", token)]),  # another browser's token
            (served.client(), [("csrf_token", token)]),  # no cookie at all
        ]
        forged = served.client()
        forged.cookies["pyqueue_csrf"] = "attacker.chosen"  # a cookie planted by a sibling site
        attempts.append((forged, [("csrf_token", "attacker.chosen")]))
        paths = ["/queues/emails/pause", f"/jobs/{ids['dead']}/retry", f"/jobs/{ids['e3']}/cancel",
                 f"/jobs/{ids['scheduled']}/run-now", "/queues/reports/retry-dead", "/queues/emails/bulk"]
        for who, fields in attempts:
            for path in paths:
                sent = [*fields, ("action", "cancel"), ("ids", str(ids["e4"]))]
                refused = who.request("POST", path, fields=sent)
                assert refused.status == 403, (path, fields, refused.status)
                assert "CSRF" in refused.body and '<section id="error"' in refused.body
    assert snapshot(conn) == before


def test_read_only_shows_no_action_and_refuses_every_post(
        conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    before = snapshot(conn)
    with dashboard(dsn, tmp_path, "--read-only") as served:
        client = served.client()
        pages = ("/", "/queues/emails", "/queues/reports", f"/jobs/{ids['dead']}",
                 f"/jobs/{ids['scheduled']}", f"/jobs/{ids['e2']}", "/schedules", "/workers")
        for path in pages:
            page = client.get(path)
            assert page.status == 200, path
            assert not re.search(r"<form[^>]*method=\"post\"", page.body), path
            assert 'name="ids"' not in page.body and 'id="read-only"' in page.body, path
        token = client.get("/").csrf_token
        posts = ("/queues/emails/pause", "/queues/idle/resume", f"/jobs/{ids['dead']}/retry",
                 f"/jobs/{ids['e3']}/cancel", f"/jobs/{ids['e2']}/cancel",
                 f"/jobs/{ids['scheduled']}/run-now",
                 "/queues/reports/retry-dead", "/queues/emails/bulk")
        for path in posts:
            refused = client.request("POST", path, fields=[("csrf_token", token), ("action", "cancel"),
                                                           ("ids", str(ids["e3"]))])
            assert refused.status == 403 and "read-only" in refused.body, path
    assert snapshot(conn) == before
