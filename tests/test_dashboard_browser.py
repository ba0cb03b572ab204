"""The dashboard in a real browser (headless Debian Chromium through
Selenium) against a real ``pyqueue dashboard`` process and a real server:
what an operator sees matches the database, the buttons change it, markup
from the database stays text, the page refreshes itself without a reload,
and every page can be photographed for the docs.

``JOBQ_SCREENSHOTS=1`` (``make screenshots``) also writes the pictures into
docs/dashboard/ (or ``JOBQ_SCREENSHOTS_DIR``), palette-compressed.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from selenium.common.exceptions import (
    NoAlertPresentException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC

from tests.dashboard_support import (
    ROOT,
    VIEWPORT,
    browser,
    enqueue,
    make_dead,
    past_hour,
    png_size,
    realistic_dataset,
    running_dashboard,
    shows,
    stats,
    status,
    submit,
    wait,
)

# Its module-scoped fixture is built once: under pytest-xdist (--dist loadgroup)
# every test of this module runs on the same worker.
pytestmark = pytest.mark.xdist_group("dashboard_browser")

Conn = psycopg.Connection[tuple[object, ...]]
COUNTED = ("ready", "scheduled", "running", "dead")  # overview cells holding a plain count
QUEUES = ("emails", "billing.invoices", "reports", "webhooks")
SCREENSHOTS = ("overview", "queue", "job", "schedules", "workers")
MIN_PNG_BYTES = 4000  # a blank 1280x800 page compresses to far less
XSS_PAYLOAD = {"x": "<script>alert(1)</script>"}
XSS_KEY = "<img src=x onerror=alert(2)>"
XSS_ERROR = "ValueError: <script>alert(3)</script> & <b>bold</b>"
XSS_QUEUE = "q<svg onload=alert(4)>"  # jobq refuses such a name: only a superuser's INSERT can make it


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


def number(text: str) -> int:
    """The integer a cell shows (thousands separators and words aside)."""
    digits = re.sub(r"\D", "", text)
    assert digits, f"no number in {text!r}"
    return int(digits)


def cell(driver: WebDriver, queue: str, column: str) -> str:
    """The text of a cell of the overview's queue table, read again when the
    page's refresh (every few seconds) replaced the row between finding the
    cell and reading it."""
    selector = f'#queues tr[data-queue="{queue}"] .{column}'
    for _ in range(10):
        try:
            return str(driver.find_element(By.CSS_SELECTOR, selector).text)
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the {column} cell of {queue} was replaced ten times while being read")


def no_alert(driver: WebDriver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.accept()


def test_the_overview_shows_the_counts_the_database_holds(conn: Conn, dsn: str, driver: WebDriver,
                                                         scratch: Path) -> None:
    realistic_dataset(conn)
    with running_dashboard(dsn, scratch) as dashboard:
        driver.get(dashboard.url + "/")
        shown = {q.get_attribute("data-queue")
                 for q in driver.find_elements(By.CSS_SELECTOR, "#queues tr[data-queue]")}
        assert shown == set(QUEUES)
        for queue in QUEUES:
            held = stats(conn, queue)
            for column in COUNTED:
                assert number(cell(driver, queue, column)) == held[column], (queue, column)
            assert (cell(driver, queue, "paused").strip().lower() == "paused") is held["paused"], queue
        assert "8" in cell(driver, "webhooks", "limits")  # concurrency 8
        assert number(cell(driver, "emails", "completed-hour")) == 23
        assert driver.find_element(By.CSS_SELECTOR, "svg#throughput").is_displayed()
        no_alert(driver)


def test_retry_on_a_dead_job_makes_it_ready(conn: Conn, dsn: str, driver: WebDriver, scratch: Path) -> None:
    job = make_dead(conn, "emails", {"to": "a@example.com"}, "TimeoutError: no answer")
    assert status(conn, job) == "dead"
    with running_dashboard(dsn, scratch) as dashboard:
        driver.get(f"{dashboard.url}/jobs/{job}")
        assert "TimeoutError: no answer" in driver.find_element(By.CSS_SELECTOR, "#errors").text
        assert str(job) in submit(driver, f"/jobs/{job}/retry")
    assert status(conn, job) == "ready"
    assert stats(conn, "emails")["dead"] == 0


def test_pause_then_resume_round_trips(conn: Conn, dsn: str, driver: WebDriver, scratch: Path) -> None:
    enqueue(conn, "emails", {"to": "b@example.com"})
    with running_dashboard(dsn, scratch) as dashboard:
        driver.get(f"{dashboard.url}/queues/emails")
        assert "emails" in submit(driver, "/queues/emails/pause")
        assert stats(conn, "emails")["paused"] is True
        assert conn.execute("SELECT count(*) FROM jobq.claim('emails', 1)").fetchone() == (0,)
        assert "emails" in submit(driver, "/queues/emails/resume")
        assert stats(conn, "emails")["paused"] is False
    assert conn.execute("SELECT count(*) FROM jobq.claim('emails', 1)").fetchone() == (1,)


def test_bulk_cancel_of_the_checked_jobs(conn: Conn, dsn: str, driver: WebDriver, scratch: Path) -> None:
    jobs = [enqueue(conn, "emails", {"n": i}) for i in range(3)]
    with running_dashboard(dsn, scratch) as dashboard:
        driver.get(f"{dashboard.url}/queues/emails")
        for job in jobs[:2]:
            driver.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job}"] input[name=ids]').click()
        form = driver.find_element(By.CSS_SELECTOR, "form#bulk")
        form.find_element(By.CSS_SELECTOR, "button[value=cancel]").click()
        with contextlib.suppress(TimeoutException):
            wait(driver, 2).until(EC.alert_is_present()).accept()
        wait(driver).until(EC.staleness_of(form))
        assert "2 of 2" in wait(driver).until(EC.visibility_of_element_located((By.ID, "flash"))).text
    assert [status(conn, job) for job in jobs] == ["cancelled", "cancelled", "ready"]


def test_markup_from_the_database_is_shown_as_text(conn: Conn, dsn: str, driver: WebDriver,
                                                   scratch: Path) -> None:
    job = make_dead(conn, "emails", XSS_PAYLOAD, XSS_ERROR, key=XSS_KEY)
    conn.execute("INSERT INTO jobq._job (queue, payload, max_attempts) VALUES (%s, '{}', 1)", (XSS_QUEUE,))
    with running_dashboard(dsn, scratch) as dashboard:
        driver.get(f"{dashboard.url}/jobs/{job}")
        no_alert(driver)
        payload = driver.find_element(By.CSS_SELECTOR, "#payload")
        assert "<script>alert(1)</script>" in payload.text and payload.is_displayed()
        assert not driver.find_elements(By.CSS_SELECTOR, "#payload script, #errors script, #errors b")
        assert XSS_ERROR in driver.find_element(By.CSS_SELECTOR, "#errors").text
        assert XSS_KEY in driver.find_element(By.TAG_NAME, "main").text
        assert not driver.find_elements(By.CSS_SELECTOR, "main img")
        driver.get(f"{dashboard.url}/queues/emails?state=dead")
        no_alert(driver)
        assert XSS_KEY in driver.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job}"]').text
        driver.get(f"{dashboard.url}/")
        no_alert(driver)
        assert XSS_QUEUE in driver.find_element(By.CSS_SELECTOR, "#queues").text
        assert not driver.find_elements(By.CSS_SELECTOR, "#queues svg")
    assert status(conn, job) == "dead"


@pytest.mark.alone  # the page's refresh is timed: it missed it beside the parallel tests
def test_a_count_changes_on_the_page_without_a_reload(conn: Conn, dsn: str, driver: WebDriver,
                                                     scratch: Path) -> None:
    enqueue(conn, "emails", {"n": 0})
    with running_dashboard(dsn, scratch, "--refresh", "1") as dashboard:
        driver.get(dashboard.url + "/")
        assert number(cell(driver, "emails", "ready")) == 1
        driver.execute_script("window.__kept = 'still here'")
        for i in range(4):
            enqueue(conn, "emails", {"n": i + 1})
        wait(driver, 30).until(lambda d: number(cell(d, "emails", "ready")) == 5)
        assert driver.execute_script("return window.__kept") == "still here", "the page was reloaded"
        assert stats(conn, "emails")["ready"] == 5


def optimised_copy(source: Path, target: Path) -> None:
    """source as a 256-colour PNG (a fraction of Chromium's size, same pixels' look)."""
    from PIL import Image  # noqa: PLC0415 - only when screenshots are kept

    with Image.open(source) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)


def test_every_page_is_photographed(conn: Conn, dsn: str, driver: WebDriver, scratch: Path) -> None:
    ids = realistic_dataset(conn)
    past_hour(conn)
    pages = {"overview": "/", "queue": "/queues/emails", "job": f"/jobs/{ids['dead']}",
             "schedules": "/schedules", "workers": "/workers"}
    assert tuple(pages) == SCREENSHOTS
    marks = {"overview": "#queues", "queue": "tr[data-job-id]", "job": "#payload",
             "schedules": "table#schedules", "workers": "table#workers"}
    with running_dashboard(dsn, scratch) as dashboard:
        for name, path in pages.items():
            driver.get(dashboard.url + path)
            wait(driver).until(shows(marks[name]))
            picture = scratch / f"{name}.png"
            assert driver.save_screenshot(str(picture)), name
            assert png_size(picture) == VIEWPORT, name
            assert picture.stat().st_size > MIN_PNG_BYTES, name
    assert conn.execute("SELECT count(*) FROM jobq.schedules").fetchone() == (2,)
    if os.environ.get("JOBQ_SCREENSHOTS") == "1":
        target = Path(os.environ.get("JOBQ_SCREENSHOTS_DIR") or ROOT / "docs" / "dashboard")
        target.mkdir(parents=True, exist_ok=True)
        for name in SCREENSHOTS:
            optimised_copy(scratch / f"{name}.png", target / f"{name}.png")
            assert png_size(target / f"{name}.png") == VIEWPORT
