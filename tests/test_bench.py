"""``pyqueue bench`` in its smallest mode, so it never rots: it completes,
writes valid JSON with every section, and reports sane numbers (never a
speed threshold: benchmarks are programs, not timed tests). And the claim's
plan: jobq.claim finds its rows with an index scan on jobq._job_claim_idx."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue import bench, bench_profile, bench_sql
from pyqueue.bench_config import QUICK
from tests.conftest import proc_dsn

Conn = psycopg.Connection[tuple[object, ...]]

SECTIONS = {"meta", "floor", "jobq_sql", "pyqueue_e2e", "pickup_latency", "scaling", "soak", "profile",
            "targets"}
SMALLEST = [  # every section, with as little work as still measures something
    "--quick", "--jobs", "600", "--batch", "50", "--connections", "2", "--workers", "2", "--repeat", "1",
    "--scaling", "1,3", "--window", "1", "--latency-samples", "8", "--soak", "0.05", "--soak-sample", "1",
]
BENCH_DATABASE = "bench_run"  # the smallest run's own database on the test server
CLAIM_PLAN_JOBS = 20_000  # rows in jobq._job: far more than a seq scan would be cheap for


def positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def assert_distribution(values: dict[str, Any]) -> None:
    assert values["p50_ms"] <= values["p95_ms"] <= values["p99_ms"] <= values["max_ms"], values
    assert all(math.isfinite(v) for v in values.values() if isinstance(v, float)), values


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, postgresql_proc: PostgreSQLExecutor,
           ) -> tuple[dict[str, Any], Path, str]:
    """One smallest run against the test server, in a database of its own
    made from the template (jobq installed): the JSON it wrote, the chart
    path, and what it printed."""
    directory = tmp_path_factory.mktemp("bench")
    database = BENCH_DATABASE
    admin = proc_dsn(postgresql_proc, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database} TEMPLATE {postgresql_proc.template_dbname}")
    dsn = proc_dsn(postgresql_proc, database)
    json_path, chart_path = directory / "bench.json", directory / "bench.png"
    out_path = directory / "stdout.txt"
    with out_path.open("w") as out, contextlib.redirect_stdout(out):
        code = bench.main(["--dsn", dsn, *SMALLEST, "--json", str(json_path), "--chart", str(chart_path)])
    assert code == 0, out_path.read_text()
    return json.loads(json_path.read_text()), chart_path, out_path.read_text()


def test_the_smallest_run_writes_every_section(report: tuple[dict[str, Any], Path, str]) -> None:
    results, chart, printed = report
    assert set(results) == SECTIONS
    assert results["meta"]["mode"] == "dsn"
    assert results["meta"]["cleanup_problems"] == []
    for key in ("server_version", "synchronous_commit", "shared_buffers", "fsync"):
        assert results["meta"]["server"][key]
    assert results["meta"]["client"]["cpu_count"] >= 1
    assert results["meta"]["config"]["batch"] == 50
    for heading in ("Throughput", "Pickup latency", "Scaling", "Soak", "Profile", "Targets"):
        assert heading in printed
    if importlib.util.find_spec("matplotlib") is not None:
        assert chart.read_bytes().startswith(b"\x89PNG")
    else:
        assert "chart skipped: matplotlib is not installed" in printed


def test_throughputs_are_positive_and_ratios_finite(report: tuple[dict[str, Any], Path, str]) -> None:
    results, _, _ = report
    floor, jobq, e2e = results["floor"], results["jobq_sql"], results["pyqueue_e2e"]
    entries = (floor["insert"], floor["drain"], floor["mixed"]["2"], jobq["enqueue"], jobq["claim_complete"],
               jobq["mixed"]["2"], e2e["runs"]["2"])
    for entry in entries:
        assert positive(entry["jobs_per_s"]), entry
        assert entry["jobs"] >= 600
    for entry in (jobq["enqueue"], jobq["claim_complete"], jobq["mixed"]["2"], e2e["runs"]["2"]):
        assert positive(entry["ratio_to_floor"]), entry
    assert positive(jobq["lifecycle_ratio_to_floor"])
    assert positive(e2e["runs"]["2"]["ratio_to_jobq_sql"])


def test_latency_percentiles_are_ordered(report: tuple[dict[str, Any], Path, str]) -> None:
    latency = report[0]["pickup_latency"]
    assert latency["samples"] == 8
    for variant in (latency, latency["jobq_sql"], latency["floor"]):
        for values in (variant, variant["enqueue_call"], variant["after_commit"]):
            assert_distribution(values)
        # Measured from before the enqueue call: always after it started.
        assert variant["p50_ms"] > 0 and variant["enqueue_call"]["p50_ms"] > 0


def test_scaling_has_every_point_and_variant(report: tuple[dict[str, Any], Path, str]) -> None:
    scaling = report[0]["scaling"]
    assert [p["workers"] for p in scaling["points"]] == [1, 3]
    for point in scaling["points"]:
        assert positive(point["jobq_jobs_per_s"]), point
        # The naive claims may get nothing done in a short window: a deadlock
        # stalls its consumers for deadlock_timeout (1 s) before it is broken.
        for variant in ("naive", "skip_locked"):
            rate = point[f"{variant}_jobs_per_s"]
            assert rate >= 0 and math.isfinite(rate), point
        assert point["naive_deadlocks"] >= 0


def test_soak_samples_the_table_over_time(report: tuple[dict[str, Any], Path, str]) -> None:
    soak = report[0]["soak"]
    assert soak["ran"] is True
    assert len(soak["samples"]) >= 2
    assert all(s["claim_idx_bytes"] > 0 and s["n_dead_tup"] >= 0 for s in soak["samples"])
    assert positive(soak["offered_jobs_per_s"])


def test_profile_and_targets(report: tuple[dict[str, Any], Path, str]) -> None:
    results = report[0]
    trips = results["profile"]["round_trips"]
    assert all(positive(v["mean_ms"]) for v in trips.values())
    assert results["profile"]["claim_plan"]["uses_claim_index"] is True
    for target in results["targets"].values():
        assert isinstance(target["met"], bool)


def test_nothing_is_left_behind(report: tuple[dict[str, Any], Path, str],
                                postgresql_proc: PostgreSQLExecutor) -> None:
    with psycopg.connect(proc_dsn(postgresql_proc, BENCH_DATABASE)) as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (bench_sql.BENCH_SCHEMA,)).fetchone() == (None,)
        left = conn.execute(
            "SELECT (SELECT count(*) FROM jobq._job WHERE queue LIKE 'bench.%%')"
            " + (SELECT count(*) FROM jobq._job_archive WHERE queue LIKE 'bench.%%')"
            " + (SELECT count(*) FROM jobq._queue WHERE queue LIKE 'bench.%%')").fetchone()
        assert left == (0,)


@pytest.mark.parametrize("calls", [1, bench_profile.PLAN_CALLS])
def test_claim_uses_the_claim_index(conn: Conn, calls: int) -> None:
    """The real jobq.claim, its plan read with auto_explain, on a table large
    enough (and ANALYZEd) that a seq scan would lose: an index scan on
    _job_claim_idx, no seq scan of jobq._job. Both the first call (custom
    plan) and a later one (plpgsql may switch to a generic plan)."""
    for queue in ("target", "other-a", "other-b"):
        bench_sql.prefill_jobq(conn, queue, CLAIM_PLAN_JOBS // 3)
    conn.execute("SELECT count(*) FROM jobq.claim('other-a', 500, 'elsewhere')")  # some running rows too
    conn.execute("ANALYZE jobq._job")
    plan = bench_profile.claim_plan(conn, "target", 10, calls=calls)
    assert plan["scans_on_job"], plan["statements"]
    assert plan["uses_claim_index"], plan["scans_on_job"]
    assert not plan["seq_scan_on_job"], plan["scans_on_job"]
    # The plan was read inside a rolled-back transaction: nothing was claimed.
    assert conn.execute("SELECT count(*) FROM jobq._job WHERE queue = 'target' AND status = 'running'"
                        ).fetchone() == (0,)


def test_add_arguments_accepts_a_parser_that_has_dsn_already() -> None:
    """The pyqueue CLI gives every subcommand --dsn; bench must not clash."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn")
    bench.add_arguments(parser)
    args = parser.parse_args(["--dsn", "dbname=x", "--quick", "--workers", "8,4,4", "--soak", "2"])
    config = bench.config_from(args)
    assert (args.dsn, config.quick, config.workers, config.soak_minutes) == ("dbname=x", True, (4, 8), 2.0)
    assert config.jobs == QUICK.jobs


def test_bad_list_options_are_refused() -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    for bad in (["--scaling", "0,4"], ["--workers", "a"], ["--server-setting", "fsync"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
