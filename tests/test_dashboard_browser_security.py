"""The dashboard's defences, tried from a real browser (headless Chromium)
against a real ``pyqueue dashboard`` process: a POST without its CSRF token,
a read-only dashboard, a login holding only jobq_viewer, a non-loopback bind
without a token, and a token that every page then needs. Each refused
action is checked in the database: nothing changed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC

from tests.dashboard_support import (
    TOKEN,
    browser,
    dashboard_argv,
    dashboard_env,
    enqueue,
    make_dead,
    running_dashboard,
    stats,
    status,
    submit,
    wait,
)
from tests.ports import free_port

# Its module-scoped fixture is built once: under pytest-xdist (--dist loadgroup)
# every test of this module runs on the same worker.
pytestmark = pytest.mark.xdist_group("dashboard_browser_security")

Conn = psycopg.Connection[tuple[object, ...]]
ACTION_LABELS = {"retry", "cancel", "run now", "pause queue", "resume queue", "pause", "resume"}
POST_CONTROLS = "form[method=post] button, form[method=post] input[type=submit], input[name=ids]"
VIEWER = "dashboard_viewer_login"  # a login role granted jobq_viewer and nothing else
FORCED_POST = """
const [url, body, done] = arguments;
fetch(url, {method: 'POST', body: new URLSearchParams(body), redirect: 'manual', credentials: 'same-origin'})
  .then(r => done(r.status), e => done('error: ' + e));
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    chromium = browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield chromium
    finally:
        chromium.quit()


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)
    return tmp_path


def forced_post(driver: WebDriver, path: str, body: dict[str, str]) -> object:
    """A POST sent by the page's own script (same origin, its cookies): the HTTP status."""
    driver.set_script_timeout(30)
    return driver.execute_async_script(FORCED_POST, path, body)


def page_text(driver: WebDriver) -> str:
    return str(driver.find_element(By.TAG_NAME, "body").text)


def test_a_form_without_its_csrf_token_is_refused(conn: Conn, dsn: str, driver: WebDriver,
                                                  scratch: Path) -> None:
    job = make_dead(conn, "emails", {"to": "c@example.com"}, "boom")
    with running_dashboard(dsn, scratch) as dashboard:
        driver.get(f"{dashboard.url}/jobs/{job}")
        form = driver.find_element(By.CSS_SELECTOR, f'form[action$="/jobs/{job}/retry"]')
        driver.execute_script("arguments[0].querySelector('input[name=csrf_token]').remove(); "
                              "arguments[0].removeAttribute('data-confirm'); arguments[0].submit();", form)
        wait(driver).until(EC.staleness_of(form))
        assert "403" in page_text(driver) and "Traceback" not in driver.page_source
        assert status(conn, job) == "dead"
        # The page's own script, with the browser's cookies, but a wrong or no token.
        driver.get(f"{dashboard.url}/queues/emails")
        assert forced_post(driver, f"/jobs/{job}/retry", {}) == 403
        assert forced_post(driver, f"/jobs/{job}/retry", {"csrf_token": "forged.0000"}) == 403
        assert forced_post(driver, "/queues/emails/pause", {"csrf_token": ""}) == 403
        assert forced_post(driver, "/queues/emails/bulk", {"action": "cancel", "ids": str(job)}) == 403
    assert status(conn, job) == "dead"
    assert stats(conn, "emails")["paused"] is False


def test_read_only_shows_no_action_and_refuses_a_forced_post(conn: Conn, dsn: str, driver: WebDriver,
                                                             scratch: Path) -> None:
    dead = make_dead(conn, "emails", {"to": "d@example.com"}, "boom")
    ready = enqueue(conn, "emails", {"to": "e@example.com"})
    with running_dashboard(dsn, scratch, "--read-only") as dashboard:
        for path in ("/", "/queues/emails", f"/jobs/{dead}", f"/jobs/{ready}", "/schedules", "/workers"):
            driver.get(dashboard.url + path)
            assert driver.find_elements(By.CSS_SELECTOR, "main"), path
            assert not driver.find_elements(By.CSS_SELECTOR, POST_CONTROLS), path
            labels = {b.text.lower() for b in driver.find_elements(By.CSS_SELECTOR, "main button")}
            assert not labels & ACTION_LABELS, (path, labels)
        driver.get(f"{dashboard.url}/queues/emails")
        assert driver.find_elements(By.CSS_SELECTOR, f'tr[data-job-id="{ready}"]')
        cookie = driver.get_cookie("pyqueue_csrf")
        token = str(cookie["value"]) if cookie else "none"
        for path, body in ((f"/jobs/{dead}/retry", {}), (f"/jobs/{ready}/cancel", {}),
                           ("/queues/emails/pause", {}), ("/queues/emails/retry-dead", {}),
                           ("/queues/emails/bulk", {"action": "cancel", "ids": str(ready)})):
            assert forced_post(driver, path, {"csrf_token": token, **body}) == 403, path
    assert (status(conn, dead), status(conn, ready)) == ("dead", "ready")
    assert stats(conn, "emails")["paused"] is False


@pytest.fixture
def viewer_dsn(conn: Conn, dsn: str) -> Iterator[str]:
    """This test's database through a login that holds jobq_viewer only."""
    conn.execute(f"DROP ROLE IF EXISTS {VIEWER}")
    conn.execute(f"CREATE ROLE {VIEWER} LOGIN IN ROLE jobq_viewer")
    database = conninfo_to_dict(dsn)["dbname"]
    conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO {VIEWER}')
    try:
        yield make_conninfo(dsn, user=VIEWER)
    finally:
        conn.execute(f'REVOKE ALL ON DATABASE "{database}" FROM {VIEWER}')
        conn.execute(f"DROP OWNED BY {VIEWER}")
        conn.execute(f"DROP ROLE {VIEWER}")


def test_a_viewer_login_reads_every_page_and_changes_nothing(conn: Conn, viewer_dsn: str, dsn: str,
                                                             driver: WebDriver, scratch: Path) -> None:
    dead = make_dead(conn, "emails", {"to": "f@example.com"}, "TimeoutError: viewer can read me")
    ready = enqueue(conn, "emails", {"to": "g@example.com"})
    conn.execute("SELECT jobq.every('viewer-tick', '0 * * * *', 'emails', runner => 'workers')")
    with psycopg.connect(viewer_dsn, autocommit=True) as viewer, pytest.raises(psycopg.Error):
        viewer.execute("SELECT jobq.retry(%s)", (dead,))  # the login really is a viewer
    pages = {"/": "#queues", "/queues/emails": f'tr[data-job-id="{dead}"]', f"/jobs/{dead}": "#errors",
             "/schedules": "table#schedules", "/workers": "table#workers"}
    with running_dashboard(viewer_dsn, scratch) as dashboard:
        for path, mark in pages.items():
            driver.get(dashboard.url + path)
            assert driver.find_elements(By.CSS_SELECTOR, mark), (path, page_text(driver)[:500])
            assert "Traceback" not in driver.page_source, path
        driver.get(f"{dashboard.url}/jobs/{dead}")
        assert "viewer can read me" in driver.find_element(By.CSS_SELECTOR, "#errors").text
        # The buttons are there (not read-only); each refusal is a message, nothing changes.
        for path, action in ((f"/jobs/{dead}", f"/jobs/{dead}/retry"),
                             (f"/jobs/{ready}", f"/jobs/{ready}/cancel"),
                             ("/queues/emails", "/queues/emails/pause")):
            driver.get(dashboard.url + path)
            flash = submit(driver, action)
            assert "not allowed" in flash.lower(), (action, flash)
            assert "Traceback" not in driver.page_source, action
    assert (status(conn, dead), status(conn, ready)) == ("dead", "ready")
    assert stats(conn, "emails")["paused"] is False


def test_a_public_bind_without_a_token_refuses_to_start(dsn: str) -> None:
    done = subprocess.run(dashboard_argv(dsn, free_port(), "--host", "0.0.0.0"), env=dashboard_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "0.0.0.0" in done.stderr and "token" in done.stderr.lower(), done.stderr


def log_in(driver: WebDriver, token: str) -> None:
    driver.find_element(By.CSS_SELECTOR, "form#login input[name=token]").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form#login button").click()


def test_with_a_token_every_page_needs_it(conn: Conn, dsn: str, driver: WebDriver, scratch: Path) -> None:
    job = enqueue(conn, "emails", {"to": "h@example.com"})
    token_file = scratch / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with running_dashboard(dsn, scratch, "--token-file", str(token_file), host="0.0.0.0") as dashboard:
        driver.delete_all_cookies()
        for path in ("/", "/queues/emails", f"/jobs/{job}", "/schedules", "/workers"):
            driver.get(dashboard.url + path)
            assert not driver.find_elements(By.CSS_SELECTOR, "#queues, tr[data-job-id], #payload, "
                                                             "table#schedules, table#workers"), path
            assert driver.find_elements(By.CSS_SELECTOR, "form#login"), path
        log_in(driver, "wrong-token-0123456789")
        wait(driver).until(lambda d: bool(d.find_elements(By.CSS_SELECTOR, "#login-failed")))
        assert not driver.find_elements(By.CSS_SELECTOR, "#queues")
        log_in(driver, TOKEN)
        wait(driver).until(lambda d: bool(d.find_elements(By.CSS_SELECTOR, "#queues")))
        driver.get(f"{dashboard.url}/jobs/{job}")
        assert '"h@example.com"' in driver.find_element(By.CSS_SELECTOR, "#payload").text
        driver.delete_all_cookies()
    with running_dashboard(dsn, scratch, env=dashboard_env(PYQUEUE_DASHBOARD_TOKEN=TOKEN)) as dashboard:
        driver.get(dashboard.url + "/")
        assert driver.find_elements(By.CSS_SELECTOR, "form#login")
        assert not driver.find_elements(By.CSS_SELECTOR, "#queues")
        driver.delete_all_cookies()
