"""``python -m pyqueue.bench.dashboard`` at a tiny size, so it never rots: it
loads the jobs it says into the test server, starts a real ``pyqueue
dashboard``, gets a 200 from every page and reports sane numbers (never a
speed threshold: a benchmark is a program, not a timed test)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.bench import dashboard as bench
from tests.conftest import proc_dsn

# Its module-scoped fixture is built once: under pytest-xdist (--dist loadgroup)
# every test of this module runs on the same worker.
pytestmark = pytest.mark.xdist_group("dashboard_bench")

DATABASE = "bench_dashboard"  # the run's own database on the test server, made from the template
ARCHIVED, LIVE, REQUESTS = 3000, 400, 3
PAGES = {"overview", "queue", "queue, deep page", "queue, state=dead", "queue, key", "queue, error text",
         "queue, error, none", "job", "schedules", "workers"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, postgresql_proc: PostgreSQLExecutor,
        ) -> tuple[dict[str, Any], str, str]:
    """One tiny run: the JSON it wrote, what it printed, and its database's DSN."""
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE} TEMPLATE {postgresql_proc.template_dbname}")
    dsn = proc_dsn(postgresql_proc, DATABASE)
    out = tmp_path_factory.mktemp("bench-dashboard") / "figures.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = bench.main(["--dsn", dsn, "--archived", str(ARCHIVED), "--live", str(LIVE),
                           "--requests", str(REQUESTS), "--json", str(out)])
    assert code == 0
    return json.loads(Path(out).read_text()), printed.getvalue(), dsn


def test_every_page_answers_and_has_sane_numbers(run: tuple[dict[str, Any], str, str]) -> None:
    figures, printed, _ = run
    assert (figures["archived"], figures["live"]) == (ARCHIVED, LIVE)
    assert set(figures["pages"]) == PAGES
    for name, page in figures["pages"].items():
        assert page["status"] == 200 and page["requests"] == REQUESTS, name
        assert page["bytes"] > 500, name
        assert 0 < page["p50_ms"] <= page["p95_ms"] <= page["max_ms"], (name, page)
        assert all(math.isfinite(page[k]) for k in ("p50_ms", "p95_ms", "max_ms")), name
        assert page["under_goal"] is (page["p95_ms"] < bench.GOAL_MS), name
        assert name in printed
    assert f"{ARCHIVED:,} archived and {LIVE:,} live" in printed
    # the pages that list jobs listed some: the filters were chosen to match
    for name in ("queue", "queue, deep page", "queue, state=dead", "queue, key", "queue, error text"):
        assert figures["pages"][name]["bytes"] > figures["pages"]["queue, error, none"]["bytes"], name


def test_the_database_holds_what_was_loaded(run: tuple[dict[str, Any], str, str]) -> None:
    _, _, dsn = run
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT status, count(*) FROM jobq.jobs GROUP BY status").fetchall()
        counts = {str(status): int(str(n)) for status, n in rows}
        assert sum(counts[s] for s in ("completed", "dead", "cancelled")) == ARCHIVED
        assert sum(counts[s] for s in ("ready", "scheduled", "running")) == LIVE
        assert all(counts[s] > 0 for s in ("completed", "dead", "cancelled", "ready", "scheduled", "running"))
        paused = conn.execute("SELECT paused FROM jobq.stats WHERE queue = 'exports'").fetchone()
        assert paused == (True,)
        assert conn.execute("SELECT count(*) FROM jobq.schedules").fetchone() == (3,)
        # new ids continue after the loaded ones
        row = conn.execute("SELECT jobq.enqueue('emails', '{}')").fetchone()
        assert row is not None and row[0] > ARCHIVED + LIVE


def test_a_database_that_holds_jobs_is_refused(run: tuple[dict[str, Any], str, str]) -> None:
    _, _, dsn = run
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = conn.execute("SELECT count(*) FROM jobq.jobs").fetchone()
        with pytest.raises(SystemExit, match="already holds jobs"):
            bench.load(conn, 10, 10)
        assert conn.execute("SELECT count(*) FROM jobq.jobs").fetchone() == before


@pytest.mark.parametrize("bad", [["--archived", "0"], ["--live", "-5"], ["--requests", "x"]])
def test_bad_sizes_are_refused(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info, contextlib.redirect_stderr(io.StringIO()):
        bench.main(bad)
    assert exit_info.value.code == 2
