"""The backlog section of ``make bench`` (``python -m pyqueue.bench.backlog``),
at a size a test can afford: it measures both versions (jobq 0.8.0, the
before, and the current one), the dashboard's overview page through the real
app, and the cold claim, and judges every goal."""

from __future__ import annotations

from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.bench import backlog
from tests.conftest import proc_dsn


def test_the_backlog_section_measures_both_versions_against_every_goal(
        postgresql_proc: PostgreSQLExecutor) -> None:
    result = backlog.backlog_section(proc_dsn(postgresql_proc, "postgres"), 3_000, 2, cold_jobs=2_000)
    old, new = result["versions"]
    assert old == backlog.OLD_VERSION and new != old
    for version in (old, new):
        assert set(result["costs_ms"][version]) == set(backlog.GOALS_MS)
        assert all(ms > 0 for ms in result["costs_ms"][version].values())
        cold = result["cold_claim"][version]
        assert cold["never_analyzed_ms"] > 0 and cold["analyzed_ms"] > 0
    assert set(result["goals"]) == {*backlog.GOALS_MS, "claim, never analyzed / analyzed"}
    assert all(isinstance(goal["met"], bool) for goal in result["goals"].values())
    text = backlog.summary(result)
    assert "with 3,000 ready jobs" in text and "dashboard overview page" in text and f"jobq {old}" in text
