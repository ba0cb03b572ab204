"""Small dashboard fixes of issue 29 (item 12), over real HTTP: only a
non-zero dead count is styled as an alarm, and the browser's icon request
gets an icon, not a 404."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from pyqueue.dashboard.rendering import STATIC
from tests.dashboard_http_support import dashboard, seed

Connection = psycopg.Connection[tuple[Any, ...]]


def dead_cell_classes(body: str, queue: str) -> set[str]:
    row = re.search(rf"<tr data-queue=\"{re.escape(queue)}\"[^>]*>(.*?)</tr>", body, re.S)
    assert row, f"no row {queue}"
    cell = re.search(r"<td class=\"([^\"]*\bdead\b[^\"]*)\">", row.group(1))
    assert cell, f"row {queue} has no dead cell"
    return set(cell.group(1).split())


def test_only_a_nonzero_dead_count_is_styled_as_an_alarm(conn: Connection, dsn: str, tmp_path: Path) -> None:
    seed(conn)
    dead: dict[str, int] = {row[0]: row[1] for row in conn.execute("SELECT queue, dead FROM jobq.stats")}
    assert dead["reports"] > 0 and dead["emails"] == 0
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        page = client.get("/")
        reports, emails = client.get("/queues/reports"), client.get("/queues/emails")
    assert page.status == 200
    for queue, count in dead.items():
        assert ("alarm" in dead_cell_classes(page.body, queue)) == (count > 0), queue
    assert re.search(r'<dd class="dead alarm">', reports.body)
    assert re.search(r'<dd class="dead">0</dd>', emails.body)
    # The stylesheet colours the alarm, never a dead cell as such (a 0 is not :empty).
    css = (STATIC / "dashboard.css").read_text()
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        if "--bad" in body:
            for selector in selectors.split(","):
                if re.search(r"\.dead\b", selector):
                    assert ".alarm" in selector, selector.strip()
    assert re.search(r"\.alarm[^{]*\{[^}]*var\(--bad\)", css)


def test_the_favicon_is_served_and_linked(conn: Connection, dsn: str, tmp_path: Path) -> None:
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        page = client.get("/")
        icon = client.get("/favicon.ico", headers={"Accept": "image/*"})
    assert icon.status == 200, icon.status
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in icon.body
    link = re.search(r'<link rel="icon"[^>]*href="([^"]+)"', page.body)
    assert link and link.group(1).endswith("/favicon.ico")
