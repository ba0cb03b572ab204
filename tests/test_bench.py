"""``pyqueue bench`` in its smallest mode (docs/performance.md's smallest run,
run as the document shows it), so it never rots: it completes,
writes valid JSON with every section and every figure of issue 11's goals,
and reports sane numbers (never a speed threshold: benchmarks are programs,
not timed tests). And the claim's plan: jobq.claim finds its rows with an
index scan on jobq._job, never a seq scan."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue.bench import drains, profiling, sql_loops, suite, worker_loops
from pyqueue.bench.config import QUICK
from pyqueue.bench.harness import Outcome, Role, Task
from pyqueue.bench.throughput import Best
from tests import bench_loops
from tests.conftest import proc_dsn
from tests.doc_blocks import ROOT, Block, block_env, blocks, documents

# Its module-scoped fixture (the smallest run) is built once: under pytest-xdist
# (--dist loadgroup) every test of this module runs on the same worker.
pytestmark = pytest.mark.xdist_group("bench")

Conn = psycopg.Connection[tuple[object, ...]]

SECTIONS = {"meta", "drain", "enqueue", "pickup_latency", "single_connection", "workflows", "scaling", "soak",
            "profile", "targets"}
HEADINGS = ("Drain", "long leases ahead", "Enqueue", "Pickup latency", "One connection alone", "Workflows",
            "Scaling", "Soak", "Profile", "Goals (issue 11")
DRAIN_JOBS = 600  # the sizes docs/performance.md's smallest run gives (its bench-run block)
WORKERS = ("4", "16")  # the worker counts issue 11's drain goals name
BENCH_DATABASE = "bench_run"  # the smallest run's own database on the test server
CLAIM_PLAN_JOBS = 20_000  # rows in jobq._job: far more than a seq scan would be cheap for


def positive(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def assert_distribution(values: dict[str, Any]) -> None:
    assert values["p50_ms"] <= values["p95_ms"] <= values["p99_ms"] <= values["max_ms"], values
    assert all(math.isfinite(v) for v in values.values() if isinstance(v, float)), values


def smallest_run_block() -> Block:
    """docs/performance.md's smallest run: the one block of the docs marked bench-run."""
    found = [b for path in documents() for b in blocks(path) if b.marker == "bench-run"]
    assert [(b.path.name, b.kind) for b in found] == [("performance.md", "sh")], found
    return found[0]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, postgresql_proc: PostgreSQLExecutor,
           ) -> Iterator[tuple[dict[str, Any], Path, str]]:
    """docs/performance.md's smallest run, run once as the document shows it
    (tests/test_docs.py leaves this block to this test), against a database
    of its own made from the template (jobq installed): the JSON it wrote,
    the chart path, and the report it printed."""
    directory = tmp_path_factory.mktemp("bench")
    directory.chmod(0o777)
    database = BENCH_DATABASE
    admin = proc_dsn(postgresql_proc, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database} TEMPLATE {postgresql_proc.template_dbname}")
    block = smallest_run_block()
    script = directory / "smallest_run.sh"
    script.write_text(f'{block.text}echo "out=$out"\n')  # where the block wrote, its last line
    url = f"postgresql://{postgresql_proc.user}@{postgresql_proc.host}:{postgresql_proc.port}/{database}"
    done = subprocess.run(["bash", "-euo", "pipefail", str(script)], cwd=ROOT, env=block_env(url),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    floors, out_line = done.stdout.splitlines()[-2:]
    assert int(floors) > 0, done.stdout  # the block's grep: the floors are in the JSON
    out = Path(out_line.removeprefix("out="))
    try:
        results = json.loads((out / "bench.json").read_text())
        yield results, out / "bench.png", (out / "report.txt").read_text()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_the_smallest_run_writes_every_section(report: tuple[dict[str, Any], Path, str]) -> None:
    results, chart, printed = report
    assert set(results) == SECTIONS
    assert results["meta"]["mode"] == "dsn"
    assert results["meta"]["cleanup_problems"] == []
    for key in ("server_version", "synchronous_commit", "shared_buffers", "fsync", "jobq_version"):
        assert results["meta"]["server"][key]
    assert results["meta"]["client"]["cpu_count"] >= 1
    assert results["meta"]["config"]["batch"] == 50
    for heading in HEADINGS:
        assert heading in printed, heading
    if importlib.util.find_spec("matplotlib") is not None:
        assert chart.read_bytes().startswith(b"\x89PNG")
    else:
        assert "chart skipped: matplotlib is not installed" in printed


def test_every_drain_row_at_every_worker_count(report: tuple[dict[str, Any], Path, str]) -> None:
    drain = report[0]["drain"]
    assert (drain["jobs"], drain["batch"]) == (DRAIN_JOBS, 50)
    assert list(drain["workers"]) == list(WORKERS)
    in_txn = worker_loops.in_transaction_supported()
    assert drain["in_transaction_worker"] is in_txn
    for found in drain["workers"].values():
        assert list(found) == list(drains.ROWS)
        for row, entry in found.items():
            if row == "pyqueue_in_txn" and not in_txn:
                assert entry["available"] is False
                continue
            assert positive(entry["jobs_per_s"]), (row, entry)
            assert entry["jobs"] == DRAIN_JOBS, (row, entry)
            assert positive(entry["ratio_to_floor"]) and positive(entry["ratio_to_pgmq"]), (row, entry)
            assert len(entry["runs_jobs_per_s"]) == 1
        assert found["floor"]["ratio_to_floor"] == 1.0
        assert positive(found["pyqueue"]["handled_jobs_per_s"])


def test_the_leased_ahead_drain_is_next_to_the_plain_one(report: tuple[dict[str, Any], Path, str]) -> None:
    leased = report[0]["drain"]["leased_ahead"]
    assert (leased["ran"], leased["leased_jobs"], leased["workers"]) == (True, 200, 4)
    for row in drains.LEASED_ROWS:
        entry = leased[row]
        assert entry["jobs"] == DRAIN_JOBS
        for key in ("jobs_per_s", "ratio_to_floor", "ratio_to_plain"):
            assert positive(entry[key]), (row, key, entry)


def test_enqueue_and_one_connection_ratios(report: tuple[dict[str, Any], Path, str]) -> None:
    results = report[0]
    enqueue = results["enqueue"]
    assert positive(enqueue["floor"]["jobs_per_s"]) and positive(enqueue["jobq"]["ratio_to_floor"])
    assert enqueue["jobq"]["jobs"] >= 600
    single = results["single_connection"]
    assert set(single["rows"]) == set(drains.SINGLE_ROWS)
    for name, entry in single["rows"].items():
        assert entry["jobs"] == 400, name
        assert positive(entry["jobs_per_s"]) and positive(entry["ratio_to_floor"]), (name, entry)


def test_every_goal_of_issue_11_is_judged(report: tuple[dict[str, Any], Path, str]) -> None:
    results, _, printed = report
    targets = results["targets"]
    assert set(targets) == set(suite.GOALS)
    assert {t["goal"] for t in targets.values()} == {1, 2, 3, 4, 5}
    for name, target in targets.items():
        assert positive(target["value"]), (name, target)
        bound = target.get("min", target.get("max"))
        assert positive(bound), (name, target)
        met = target["value"] >= bound if "min" in target else target["value"] <= bound
        assert target["met"] is met, (name, target)
        assert target["label"] in printed
    assert "issue 6" not in printed


def test_workflows_batch_drain_next_to_the_plain_one(report: tuple[dict[str, Any], Path, str]) -> None:
    workflows = report[0]["workflows"]
    assert (workflows["jobs"], workflows["workers"]) == (DRAIN_JOBS, 16)
    plain, batch = workflows["plain"]["jobs_per_s"], workflows["batch_with_callback"]["jobs_per_s"]
    assert positive(plain) and positive(batch)
    assert workflows["batch_vs_plain"] == pytest.approx(batch / plain, abs=0.01)
    fan_in = workflows["fan_in"]
    assert fan_in["members"] == 10_000  # --quick
    assert positive(fan_in["enqueue_callback_ms"]) and positive(fan_in["release_ms"])


def test_latency_percentiles_are_ordered(report: tuple[dict[str, Any], Path, str]) -> None:
    latency = report[0]["pickup_latency"]
    assert (latency["samples"], latency["workers"]) == (8, 2)
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
    assert all(s["index_bytes"] > 0 and s["n_dead_tup"] >= 0 for s in soak["samples"])
    assert positive(soak["offered_jobs_per_s"])


def test_profile(report: tuple[dict[str, Any], Path, str]) -> None:
    profile = report[0]["profile"]
    assert all(positive(v["mean_ms"]) for v in profile["round_trips"].values())
    assert profile["claim_plan"]["uses_index"] is True


def test_nothing_is_left_behind(report: tuple[dict[str, Any], Path, str],
                                postgresql_proc: PostgreSQLExecutor) -> None:
    with psycopg.connect(proc_dsn(postgresql_proc, BENCH_DATABASE)) as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (sql_loops.BENCH_SCHEMA,)).fetchone() == (None,)
        tables = [str(row[0]) for row in conn.execute(sql_loops.QUEUE_TABLES).fetchall()]
        assert "jobq._job" in tables
        for table in tables:
            left = conn.execute(f"SELECT count(*) FROM {table} WHERE queue LIKE 'bench.%%'").fetchone()
            assert left == (0,), table


@pytest.mark.parametrize("calls", [1, profiling.PLAN_CALLS])
def test_claim_uses_the_claim_index(conn: Conn, calls: int) -> None:
    """The real jobq.claim, its plan read with auto_explain, on a table large
    enough (and ANALYZEd) that a seq scan would lose: an index scan on
    jobq._job (whatever the index is called), no seq scan. Both the first call (custom
    plan) and a later one (plpgsql may switch to a generic plan)."""
    for queue in ("target", "other-a", "other-b"):
        sql_loops.prefill_jobq(conn, queue, CLAIM_PLAN_JOBS // 3)
    conn.execute("SELECT count(*) FROM jobq.claim('other-a', 500, 'elsewhere')")  # some running rows too
    conn.execute("ANALYZE jobq._job")
    plan = profiling.claim_plan(conn, "target", 10, calls=calls)
    assert plan["scans_on_job"], plan["statements"]
    assert plan["uses_index"], plan["scans_on_job"]
    assert not plan["seq_scan_on_job"], plan["scans_on_job"]
    # The plan was read inside a rolled-back transaction: nothing was claimed.
    assert conn.execute("SELECT count(*) FROM jobq._job WHERE queue = 'target' AND status = 'running'"
                        ).fetchone() == (0,)


def test_add_arguments_accepts_a_parser_that_has_dsn_already() -> None:
    """The pyqueue CLI gives every subcommand --dsn; bench must not clash."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn")
    suite.add_arguments(parser)
    args = parser.parse_args(["--dsn", "dbname=x", "--quick", "--workers", "16,4,4", "--soak", "2",
                              "--leased-jobs", "0", "--latency-workers", "3"])
    config = suite.config_from(args)
    assert (args.dsn, config.quick, config.soak_minutes) == ("dbname=x", True, 2.0)
    assert config.drain_workers == (4, 16)
    assert (config.leased_jobs, config.latency_workers) == (0, 3)
    assert config.drain_jobs == QUICK.drain_jobs


def test_the_full_run_measures_what_issue_11_names() -> None:
    config = suite.config_from(argparse.Namespace(**dict.fromkeys(
        ("quick", "dsn", "drain_jobs", "workers", "leased_jobs", "leased_workers", "single_jobs", "jobs",
         "batch", "connections", "repeat", "statistic", "scaling", "scaling_repeat", "window",
         "latency_samples", "latency_workers", "worker_concurrency", "soak", "soak_sample"))))
    assert (config.drain_jobs, config.drain_workers, config.batch) == (50_000, (4, 16), 100)
    assert (config.leased_jobs, config.leased_workers, config.latency_workers) == (10_000, 4, 16)


def test_bad_list_options_are_refused() -> None:
    parser = argparse.ArgumentParser()
    suite.add_arguments(parser)
    for bad in (["--scaling", "0,4"], ["--workers", "a"], ["--server-setting", "fsync"],
                ["--leased-jobs", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


@pytest.mark.parametrize(("value", "met"), [(0.45, True), (0.44, False), (None, False)])
def test_a_minimum_goal_is_met_at_its_bound(monkeypatch: pytest.MonkeyPatch, value: float | None,
                                            met: bool) -> None:
    figures = dict.fromkeys(suite.GOALS, 1.0) | {"drain_w4_vs_floor": value, "pickup_p99_vs_floor": 1.6}
    monkeypatch.setattr(suite, "figures", lambda results: figures)
    targets = suite.targets({})
    assert targets["drain_w4_vs_floor"]["met"] is met
    assert targets["pickup_p99_vs_floor"]["met"] is False  # a maximum: 1.6 > 1.5
    assert targets["enqueue_vs_floor"]["met"] is True


def fake_worker(register: Callable[..., None]) -> type:
    return type("FakeWorker", (), {"register": register})


def test_the_in_transaction_mode_is_found_by_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    def plain(self: object, queue: str, fn: object) -> None: ...

    def with_mode(self: object, queue: str, fn: object, *, in_transaction: bool = False) -> None: ...

    monkeypatch.setattr(pyqueue, "Worker", fake_worker(plain))
    assert worker_loops.in_transaction_supported() is False
    monkeypatch.setattr(pyqueue, "Worker", fake_worker(with_mode))
    assert worker_loops.in_transaction_supported() is True


def test_repeated_rounds_count_by_median_or_best() -> None:
    def outcome(rate: float) -> Outcome:
        return Outcome(int(rate), 1.0)

    cases = (("median", (3, 1, 2), 2), ("median", (4, 1, 3, 2), 2), ("best", (3, 1, 2), 3))
    for statistic, rates, chosen in cases:
        best = Best(statistic)
        for rate in rates:
            best.keep("row", outcome(rate))
        assert best.outcomes["row"].jobs == chosen, (statistic, rates)
        assert best.result("row")["runs_jobs_per_s"] == list(map(float, rates))
    with pytest.raises(ValueError, match="statistic"):
        Best("mean")


def test_a_latency_sample_that_arrives_after_its_count_is_waited_for() -> None:
    """A driver counts a job (shared memory) before its sample has come
    through the samples pipe (a feeder thread, late on a busy machine): the
    latency section waits for every sample until its timeout, instead of
    failing with "latency jobs reported no handler start"."""
    samples = 3
    role = Role(bench_loops.late_sampler, [Task("", "", samples, "late-sampler")])
    delays = worker_loops.pickups(role, lambda k: None, samples, QUICK, seed=1)
    assert sorted(delays) == ["after_commit", "enqueue_call", "total"]
    assert len(delays["total"]) == samples
    assert all(value > 0 for value in delays["total"]), delays
