"""Who may use the dashboard, over real HTTP and real processes: off
loopback ``pyqueue dashboard`` refuses to start without authentication;
a token (bearer header or login form) or HTTP basic against a scrypt hash
guards every page; without its extra the command says what to install;
and a login holding only jobq_viewer reads every page and changes nothing.
"""

from __future__ import annotations

import re
import secrets
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from tests.conftest import ROOT
from tests.dashboard_http_support import (
    SECRET_ENV,
    TOKEN_ENV,
    Client,
    basic,
    dashboard,
    dashboard_env,
    run_command,
    seed,
)
from tests.ports import free_port

Connection = psycopg.Connection[tuple[Any, ...]]
TOKEN = "http-test-token-0123456789abcdef"
EXTRA = ("starlette", "jinja2", "uvicorn", "multipart")
WITHOUT_EXTRA = '''
import sys
for name in {extra!r}:
    sys.modules[name] = None  # as if not installed: find_spec is None, import raises ImportError
from pyqueue.cli import main
sys.exit(main(sys.argv[1:]))
'''


def nothing_listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_off_loopback_without_authentication_it_refuses_to_start(dsn: str, tmp_path: Path) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.10", "dashboard.example.org"):
        port = free_port()
        done = run_command("dashboard", "--dsn", dsn, "--host", host, "--port", str(port))
        assert done.returncode == 2, (host, done.stderr)
        assert f"refusing to serve the dashboard on {host} without authentication" in done.stderr
        assert "--token-file" in done.stderr and TOKEN_ENV in done.stderr
        assert nothing_listens(port)
    short = tmp_path / "short-token"
    short.write_text("tooshort\n")
    done = run_command("dashboard", "--dsn", dsn, "--host", "0.0.0.0", "--token-file", str(short))
    assert done.returncode == 2 and "at least 16 characters" in done.stderr
    done = run_command("dashboard", "--dsn", dsn, "--host", "0.0.0.0", "--basic-user", "admin")
    assert done.returncode == 2 and "--basic-user and --password-hash-file go together" in done.stderr
    done = run_command("dashboard", "--dsn", dsn, "--token-file", str(tmp_path / "missing"))
    assert done.returncode == 2 and "cannot read the token file" in done.stderr
    from_env = dashboard_env(**{TOKEN_ENV: f"{TOKEN}\n"})  # the token from the environment instead
    with dashboard(dsn, tmp_path, "--host", "0.0.0.0", env=from_env) as served:
        assert served.client().get("/", headers={"Accept": "*/*"}).status == 401
        assert served.client(headers={"Authorization": f"Bearer {TOKEN}"}).get("/").status == 200


def test_a_token_guards_every_page(conn: Connection, dsn: str, tmp_path: Path) -> None:
    seed(conn)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with dashboard(dsn, tmp_path, "--host", "0.0.0.0", "--token-file", str(token_file)) as served:
        anonymous = served.client()
        for path in ("/", "/queues/emails", "/jobs/1", "/schedules", "/workers"):
            page = anonymous.get(path, headers={"Accept": "*/*"})
            assert page.status == 401 and "emails" not in page.body, path
            assert page.headers["www-authenticate"].startswith("Bearer")
        assert anonymous.get("/").status == 303  # a browser (Accept: text/html) goes to the login form
        assert anonymous.get("/").headers["location"] == "/login"
        wrong = served.client(headers={"Authorization": "Bearer wrong-token-0123456789"})
        assert wrong.get("/").status == 303
        assert anonymous.get("/static/dashboard.css").status == 200  # assets are not secret
        assert anonymous.get("/metrics", headers={"Accept": "*/*"}).status == 401
        with_header = served.client(headers={"Authorization": f"Bearer {TOKEN}"})
        page = with_header.get("/")
        assert page.status == 200 and 'data-queue="emails"' in page.body
        scraped = with_header.get("/metrics", headers={"Accept": "*/*"})
        assert scraped.status == 200 and 'jobq_jobs{queue="emails",state="ready"} 2.0' in scraped.body
        # CSRF still applies with the header.
        assert with_header.post("/queues/emails/pause", [], token_from="/").status == 303
        assert with_header.request("POST", "/queues/emails/resume", fields=[]).status == 403
        browser = served.client()
        login = browser.get("/login")
        assert login.status == 200 and 'name="token"' in login.body
        failed = browser.request("POST", "/login", fields=[("csrf_token", login.csrf_token),
                                                          ("token", "wrong-token-0123456789")])
        assert failed.status == 401 and 'id="login-failed"' in failed.body
        assert "pyqueue_session" not in browser.cookies
        assert browser.request("POST", "/login", fields=[("token", TOKEN)]).status == 403  # no CSRF token
        done = browser.request("POST", "/login", fields=[("csrf_token", login.csrf_token), ("token", TOKEN)])
        assert done.status == 303 and done.headers["location"] == "/"
        [session] = [cookie for cookie in done.cookies if cookie.startswith("pyqueue_session=")]
        assert "HttpOnly" in session and "samesite=strict" in session.lower() and TOKEN not in session
        assert browser.get("/queues/emails").status == 200
    assert conn.execute("SELECT paused FROM jobq.stats WHERE queue = 'emails'").fetchone() == (True,)


def test_http_basic_with_a_password_hash(conn: Connection, dsn: str, tmp_path: Path) -> None:
    seed(conn)
    made = run_command("dashboard", "--hash-password", stdin="correct horse battery\n")
    assert made.returncode == 0, made.stderr
    assert re.fullmatch(r"scrypt\$16384\$8\$1\$[\w-]+\$[\w-]+\n", made.stdout)
    again = run_command("dashboard", "--hash-password", stdin="correct horse battery\n")
    assert again.stdout != made.stdout  # salted
    hash_file = tmp_path / "password-hash"
    hash_file.write_text(made.stdout)
    args = ("--host", "0.0.0.0", "--basic-user", "ops", "--password-hash-file", str(hash_file))
    with dashboard(dsn, tmp_path, *args) as served:
        refused = served.client().get("/")
        assert refused.status == 401 and refused.headers["www-authenticate"].startswith("Basic")
        assert served.client(headers=basic("ops", "wrong password")).get("/").status == 401
        assert served.client(headers=basic("someone", "correct horse battery")).get("/").status == 401
        allowed = served.client(headers=basic("ops", "correct horse battery"))
        assert allowed.get("/").status == 200 and allowed.get("/queues/emails").status == 200
        assert allowed.request("POST", "/queues/emails/pause", fields=[]).status == 403  # CSRF still applies
    assert conn.execute("SELECT paused FROM jobq.stats WHERE queue = 'emails'").fetchone() == (False,)
    hash_file.write_text("not-a-hash")
    done = run_command("dashboard", "--dsn", dsn, *args)
    assert done.returncode == 2 and "not a password hash" in done.stderr


def test_without_the_extra_it_says_what_to_install(dsn: str) -> None:
    probe = textwrap.dedent(WITHOUT_EXTRA.format(extra=EXTRA))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env=dashboard_env(), check=False)

    done = run("dashboard", "--dsn", dsn)
    assert done.returncode == 2 and "pip install 'jobq[dashboard]'" in done.stderr
    helped = run("--help")
    assert helped.returncode == 0 and "dashboard" in helped.stdout
    assert run("dashboard", "--help").returncode == 0
    assert run("stats", "--dsn", dsn).returncode == 0  # the other commands do not need it


def test_a_jobq_viewer_login_reads_every_page_and_changes_nothing(
        conn: Connection, dsn: str, tmp_path: Path) -> None:
    ids = seed(conn)
    role = f"dashboard_viewer_{secrets.token_hex(4)}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        conn.execute(f"GRANT jobq_viewer TO {role}")
        viewer_dsn = make_conninfo(dsn, user=role)
        pages = {"/": 'data-queue="reports"', "/queues/reports": f'data-job-id="{ids["dead"]}"',
                 f"/jobs/{ids['dead']}": 'data-attempt="2"', "/schedules": 'data-schedule="nightly"',
                 "/workers": 'data-worker="w-1"', "/queues/emails?state=scheduled&key=&error=x": "No job"}
        with dashboard(viewer_dsn, tmp_path, "--read-only") as served:
            client = served.client()
            for path, shown in pages.items():
                page = client.get(path)
                assert page.status == 200 and shown in page.body, (path, page.status, page.body[-600:])
        with dashboard(viewer_dsn, tmp_path) as served:
            page = served.client().act("/queues/emails", "/queues/emails/pause")
            assert page.status == 200
            assert page.flash.startswith("not allowed for this dashboard's database login")
            page = served.client().act(f"/jobs/{ids['dead']}", f"/jobs/{ids['dead']}/retry")
            assert page.flash.startswith("not allowed")
        row = conn.execute("SELECT paused FROM jobq.stats WHERE queue = 'emails'").fetchone()
        assert row == (False,)
        row = conn.execute("SELECT status FROM jobq.jobs WHERE id = %s", (ids["dead"],)).fetchone()
        assert row == ("dead",)
    finally:
        conn.execute(f"DROP ROLE {role}")


def test_behind_a_proxy_under_a_prefix(conn: Connection, dsn: str, tmp_path: Path) -> None:
    """``--root-path /jobq`` (the proxy strips the prefix): links, cookies and
    redirects carry the prefix the browser sees."""
    seed(conn)
    with dashboard(dsn, tmp_path, "--root-path", "/jobq") as served:
        client = served.client()
        page = client.get("/queues/emails")
        assert page.status == 200 and '<link rel="stylesheet" href="/jobq/static/dashboard.css">' in page.body
        assert 'action="/jobq/queues/emails/pause"' in page.body
        assert any("Path=/jobq;" in cookie for cookie in page.cookies)
        posted = client.post("/queues/emails/pause", [], token_from="/queues/emails")
        assert posted.status == 303 and posted.headers["location"] == "/jobq/queues/emails"
    assert conn.execute("SELECT paused FROM jobq.stats WHERE queue = 'emails'").fetchone() == (True,)


def paused(conn: Connection, queue: str) -> bool:
    row = conn.execute("SELECT paused FROM jobq.stats WHERE queue = %s", (queue,)).fetchone()
    return bool(row and row[0])


def test_dashboards_sharing_a_secret_accept_each_others_forms(
    conn: Connection, dsn: str, tmp_path: Path
) -> None:
    seed(conn)
    secret_file = tmp_path / "secret"
    secret_file.write_text(secrets.token_urlsafe(32) + "\n")
    with dashboard(dsn, tmp_path, "--secret-file", str(secret_file)) as first, \
            dashboard(dsn, tmp_path, env=dashboard_env(**{SECRET_ENV: secret_file.read_text()})) as second, \
            dashboard(dsn, tmp_path) as stranger:
        browser = first.client()
        token = browser.get("/queues/emails").csrf_token
        # the form of the first process, posted to the second (a proxy balancing them): accepted
        other = Client(second.port)
        other.cookies = dict(browser.cookies)
        done = other.post("/queues/emails/pause", [("csrf_token", token)])
        assert done.status == 303 and paused(conn, "emails")
        # to a process with its own random key, the same form is forged: refused, nothing changed
        alien = Client(stranger.port)
        alien.cookies = dict(browser.cookies)
        assert alien.post("/queues/emails/resume", [("csrf_token", token)]).status == 403
        assert paused(conn, "emails")


def test_a_short_or_empty_secret_is_refused(dsn: str, tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("too-short")
    done = run_command("dashboard", "--dsn", dsn, "--port", str(free_port()), "--secret-file", str(short))
    assert done.returncode == 2 and "needs at least 32" in done.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    done = run_command("dashboard", "--dsn", dsn, "--port", str(free_port()), "--secret-file", str(empty))
    assert done.returncode == 2 and "is empty" in done.stderr
    done = run_command("dashboard", "--dsn", dsn, "--port", str(free_port()),
                       env=dashboard_env(**{SECRET_ENV: "short"}))
    assert done.returncode == 2 and "needs at least 32" in done.stderr


def test_a_trailing_slash_redirect_never_names_the_client_s_host(
    conn: Connection, dsn: str, tmp_path: Path
) -> None:
    """A path with a stray trailing slash is sent to its page with a relative
    Location: the Host header (which the client chooses) never makes it into
    a redirect (0.8.0 sent ``Host: evil.com`` to ``http://evil.com/…``)."""
    seed(conn)
    evil = {"Host": "evil.com"}
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        moved = client.get("/queues/emails/?state=ready", headers=evil)
        assert moved.status == 307 and moved.headers["location"] == "/queues/emails?state=ready"
        assert client.get(moved.headers["location"]).status == 200
        assert client.get("/schedules/", headers=evil).headers["location"] == "/schedules"
        assert client.get("/queues/a%25b/", headers=evil).headers["location"] == "/queues/a%25b"
        # a path a browser would read as another host's (//evil.com) is not redirected at all
        assert client.get("//evil.com/", headers=evil).status == 404
        assert client.get("/nowhere/", headers=evil).status == 404
    with dashboard(dsn, tmp_path, "--root-path", "/jobq") as served:
        moved = served.client().get("/queues/emails/", headers=evil)
        assert moved.status == 307 and moved.headers["location"] == "/jobq/queues/emails"
