"""The benchmark programs of issue 16 do what they say, on real servers, at a
tiny size and without any timing assertion (their figures are what
``make bench`` prints): the prune comparison empties both archives, the
partitioned copy of the live table runs jobq unchanged, the soak's
verdict catches drift, growth and a slowing pickup, the pooler counts
the round of median ratio and refuses bad sizes, the queue-grants
comparison measures every workload on every configuration, and the
Python-side comparison of issue 24 measures every row and judges every goal, the fair claim's A/B
times all four sessions. A bench program stopped by
SIGTERM mid-drain stops its driver processes, PgBouncer and its throwaway
server before it exits. (The pooler's drain is exercised by
tests/test_pooler_fleet.py.) The cold-start benchmark (issue 24) refuses
bad arguments, prints every row of a tiny run, exits 1 when a goal is
missed (forced by its own option) and says why, and drops its databases."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.bench import (
    cold_start,
    cold_systems,
    fair,
    fair_ab,
    pooler,
    prune,
    python_side,
    queue_grants,
    queue_partitions,
    soak,
    tracing_cost,
)
from pyqueue.bench.harness import Role, Run, Signals, Task, Usage, process_usage
from pyqueue.bench.suite import LOCAL_DATABASE, LOCAL_PORT
from tests.chaos_support import drop_login_role
from tests.conftest import ROOT, proc_dsn
from tests.coord_support import Conn, scalar
from tests.process_support import descendants, processes_mentioning, running
from tests.worker_support import wait_until


def test_the_prune_benchmark_empties_both_archives(postgresql_proc: PostgreSQLExecutor) -> None:
    result = prune.prune_section(proc_dsn(postgresql_proc, "postgres"), 2000)
    for label in ("delete", "partition_drop"):
        assert result[label]["rows"] == 2000, result  # it checks that nothing is left, too
        assert result[label]["wal_bytes"] > 0
    assert result["delete"]["calls"] >= 2 and result["partition_drop"]["calls"] == 2  # the last returns 0
    assert "vacuum" in result["delete"] and "vacuum" not in result["partition_drop"]
    assert "2,000 expired jobs" in prune.summary(result)


def test_jobq_runs_unchanged_on_a_live_table_partitioned_by_queue(conn: Conn) -> None:
    queues = queue_partitions.queue_names(3)
    queue_partitions.partition_by_queue(conn, queues)  # checks an enqueue, a claim and a completion itself
    assert scalar(conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'jobq._job'::regclass") == 4
    ids = [scalar(conn, "SELECT jobq.enqueue(%s, '{}')", (queue,)) for queue in queues]
    homes = [scalar(conn, "SELECT tableoid::regclass::text FROM jobq._job WHERE id = %s", (i,)) for i in ids]
    assert homes == ["jobq._job_q0", "jobq._job_q1", "jobq._job_q2"]
    claimed = conn.execute("SELECT id, lease_token FROM jobq.claim(%s, 5)", (queues[1],)).fetchall()
    assert [row[0] for row in claimed] == [ids[1]]
    assert scalar(conn, "SELECT jobq.complete_many(%s, %s)", ([claimed[0][0]], [claimed[0][1]])) == 1
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("INSERT INTO jobq._job (id, queue, payload, max_attempts) VALUES (%s, %s, '{}', 1)",
                     (ids[0], queues[0]))


def test_the_queue_grants_benchmark_measures_every_workload_on_every_configuration(
    conn: Conn, postgresql_proc: PostgreSQLExecutor
) -> None:
    try:
        sizes = queue_grants.Sizes(jobs=300, calls=100, consumers=2, producers=2)
        result = queue_grants.measure(proc_dsn(postgresql_proc, "postgres"), sizes, rounds=1, grants=2)
    finally:
        drop_login_role(conn, queue_grants.APP_ROLE)
        conn.execute(f"DROP ROLE {queue_grants.OTHER_ROLE}")
    assert set(result["figures"]) == set(queue_grants.THROUGHPUT + queue_grants.CPU)
    for workload, by_label in result["figures"].items():
        assert set(by_label) == set(queue_grants.LABELS)
        assert all(len(values) == 1 and values[0] >= 0 for values in by_label.values()), (workload, by_label)
    for workload in queue_grants.THROUGHPUT:
        assert all(values[0] > 0 for values in result["figures"][workload].values()), workload
    summary = queue_grants.summary(result)
    assert "server CPU µs per job" in summary and f"(goal <= {queue_grants.GOAL})" in summary
    assert scalar(conn, "SELECT count(*) FROM pg_database WHERE datname LIKE 'jobq_bench_grants_%'") == 0


def test_the_fair_queue_benchmark_measures_every_workload_on_every_configuration(
    postgresql_proc: PostgreSQLExecutor
) -> None:
    sizes = fair.Sizes(calls=50, key_counts=(1, 10))
    result = fair.measure(proc_dsn(postgresql_proc, "postgres"), sizes, rounds=1)
    assert set(result["figures"]) == set(fair.WORKLOADS)
    assert set(result["figures"][fair.CLAIM_100]) == {"0.8.0 plain", "0.12.0 plain", "plain", "fair, 1 keys",
                                                      "fair, 10 keys"}
    assert set(result["figures"][fair.ENQUEUE_1]) == {"0.8.0 plain", "0.12.0 plain", "plain"}
    assert all(v[0] >= 0 for by in result["figures"].values() for v in by.values())
    summary = fair.summary(result)
    assert "fair, 10 keys" in summary and "worst speed ratio per goal" in summary



def test_the_fair_ab_benchmark_times_all_four_sessions_and_drops_its_databases(
    postgresql_proc: PostgreSQLExecutor
) -> None:
    dsn = proc_dsn(postgresql_proc, "postgres")
    result = fair_ab.measure(dsn, "0.13.0", (1, 10), batch=2, calls=5, rounds=1)
    assert set(result["medians"]) == {"1 keys", "10 keys"}
    assert all(set(m) == set(fair_ab.SESSIONS) and min(m.values()) > 0 for m in result["medians"].values())
    assert set(result["speeds"]["10 keys"]) == {"A fair ÷ plain", "B fair ÷ plain", "B fair ÷ A fair"}
    summary = fair_ab.summary(result)
    assert "A = jobq 0.13.0" in summary and "10 keys" in summary
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert scalar(conn, "SELECT count(*) FROM pg_database WHERE datname LIKE 'jobq_bench_fair_ab_%'") == 0
    with pytest.raises(SystemExit):
        fair_ab.main(["--keys", "1,x"])
    with pytest.raises(SystemExit):
        fair_ab.main(["--batch", "0"])

def series(rates: list[float], *, dead: list[int] | None = None, p99: list[float] | None = None,
           size: list[int] | None = None) -> list[dict[str, Any]]:
    count = len(rates)
    return [{"t_s": 10.0 * (k + 1), "jobs_per_s": rates[k],
             "n_dead_tup": (dead or [1000] * count)[k], "p99_ms": (p99 or [20.0] * count)[k],
             "total_bytes": (size or [10**6] * count)[k]} for k in range(count)]


def test_the_soak_verdict_holds_a_steady_run() -> None:
    found = soak.verdict(series([5000.0] * 18), 10.0)
    assert found["ok"] is True
    assert found["throughput_drift"]["drift"] == 0.0


@pytest.mark.parametrize(("samples", "failed"), [
    (series([5000.0] * 9 + [4000.0] * 9), "throughput_drift"),
    (series([5000.0] * 18, dead=[1000] * 12 + [5000] * 6), "n_dead_tup"),
    (series([5000.0] * 18, size=[10**6] * 12 + [3 * 10**6] * 6), "total_bytes"),
    (series([5000.0] * 18, p99=[40.0] * 12 + [400.0] * 6), "p99_ms"),
])
def test_the_soak_verdict_catches_what_it_is_for(samples: list[dict[str, Any]], failed: str) -> None:
    found = soak.verdict(samples, 10.0)
    assert found["ok"] is False and found[failed]["ok"] is False, found
    others = [key for key in ("throughput_drift", "n_dead_tup", "total_bytes", "p99_ms") if key != failed]
    assert all(found[key]["ok"] for key in others), found


def test_a_slow_pickup_under_the_floor_is_still_stable() -> None:
    found = soak.verdict(series([5000.0] * 18, p99=[5.0] * 12 + [30.0] * 6), 10.0)
    assert found["p99_ms"]["ok"] is True  # six times slower, but under 50 ms


@pytest.mark.parametrize(("ratios", "counted"), [
    ([0.9, 0.6, 0.8], 0.8), ([0.7], 0.7), ([0.9, 0.5], 0.5), ([0.82, 0.95, 0.61, 0.7, 0.88], 0.82)])
def test_the_pooler_counts_the_round_of_median_ratio(ratios: list[float], counted: float) -> None:
    rounds = [{"ratio": r, "pooled": {"k": k}, "direct": {"k": k}} for k, r in enumerate(ratios)]
    middle = pooler.median_round(rounds)
    assert middle["ratio"] == counted
    assert middle["pooled"] is rounds[ratios.index(counted)]["pooled"], "that round's own drains"


@pytest.mark.parametrize("option", ["--rounds", "--jobs", "--consumers", "--processes", "--batch"])
def test_the_pooler_refuses_sizes_under_one(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        pooler.main([option, "0"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert option in error and "must be at least 1" in error, error


def test_the_python_side_measures_every_row_and_judges_every_goal(conn: Conn, dsn: str) -> None:
    tiny = python_side.Settings(jobs=300, batch=50, concurrency=2, enqueue_jobs=300, producers=2,
                                single_jobs=20, rounds=1, fleets=(1, 2))
    result = python_side.python_side(dsn, conn, tiny)
    assert set(result["rows"]) == set(python_side.ROWS)
    assert all(row["jobs_per_s"] > 0 and len(row["runs_jobs_per_s"]) == 1 for row in result["rows"].values())
    assert result["rows"]["fleet_large"]["about"] == "W=2 pyqueue.Worker processes"
    assert set(result["goals"]) == set(python_side.GOALS)
    assert all(goal["value"] > 0 and goal["met"] in (True, False) for goal in result["goals"].values())
    assert result["ok"] == all(goal["met"] for goal in result["goals"].values())
    assert scalar(conn, "SELECT count(*) FROM jobq._job") == 0  # every drain drained, the rest removed
    assert all(value > 0 for value in result["by_hand"].values()), result["by_hand"]
    drains = ("sql_loop", "worker", "async_worker", "fleet_small", "fleet_large")
    for row in drains:  # each drain reads its processes' CPU (a few ticks at this size: maybe 0)
        assert result["rows"][row]["client_cpu_us_per_job_median"] >= 0, result["rows"][row]
        assert result["rows"][row]["context_switches_per_job_median"] >= 0
    assert "client_cpu_us_per_job_median" not in result["rows"]["insert"]
    printed = python_side.summary(result)
    assert "one pyqueue.aio.AsyncWorker process" in printed and "time per pyqueue.enqueue" in printed
    assert "against the same SQL by hand" in printed and "client CPU µs/job" in printed


def test_the_client_usage_of_a_process_counts_its_threads_cpu_and_switches() -> None:
    def spin() -> None:
        end = time.process_time() + 0.1
        while time.process_time() < end:
            pass

    before = process_usage(os.getpid())
    thread = threading.Thread(target=spin)  # another thread's CPU counts too
    thread.start()
    thread.join()
    for _ in range(50):
        time.sleep(0.001)  # voluntary switches
    spent = process_usage(os.getpid()) - before
    assert spent.cpu_seconds >= 0.05, spent
    assert spent.switches >= 50, spent
    assert process_usage(2**22 + 12345) == Usage(0.0, 0)  # no such process: nothing, no error


@pytest.mark.parametrize(("rates", "met"), [
    ({"worker": 80, "async_worker": 80, "fleet_large": 90, "enqueue_many": 90, "insert_one": 120}, True),
    ({"worker": 79, "async_worker": 80, "fleet_large": 90, "enqueue_many": 90, "insert_one": 120}, False),
    ({"worker": 80, "async_worker": 80, "fleet_large": 89, "enqueue_many": 90, "insert_one": 120}, False),
    ({"worker": 80, "async_worker": 80, "fleet_large": 90, "enqueue_many": 90, "insert_one": 121}, False),
])
def test_the_python_side_goals_hold_at_their_bounds(rates: dict[str, float], met: bool) -> None:
    floors = {"sql_loop": 100, "fleet_small": 100, "insert": 100, "enqueue_one": 100}
    goals = python_side.judged({**floors, **rates})
    assert all(goal["met"] for goal in goals.values()) is met, goals
    assert goals["enqueue_time_vs_insert"]["max"] == 1.2  # time per job: the one bound from above


def test_a_bench_program_stopped_by_sigterm_stops_what_it_started(tmp_path: Path) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-m", "pyqueue.bench.pooler", "--quick", "--consumers", "40", "--processes", "2",
         "--jobs", "60000", "--json", str(tmp_path / "pooler.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert bench.stderr is not None
        first = bench.stderr.readline()
        started = re.search(r"starting a throwaway PostgreSQL server in (\S+)", first)
        assert started, first
        directory = started.group(1)
        dsn = f"host={directory} port={LOCAL_PORT} user=postgres dbname={LOCAL_DATABASE}"

        def draining() -> bool:
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                    return bool(scalar(conn, "SELECT count(*) FROM jobq._job WHERE status = 'running'"))
            except psycopg.Error:
                return False

        wait_until(draining, "the consumers to hold leases", timeout=120)
        below = descendants(bench.pid)
        server = processes_mentioning(directory)
        assert len(below) >= 3 and server, (below, server)  # forkserver, 2 consumers, PgBouncer; the server
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=90)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM: stopping the drivers and the servers first" in err
    started_here = below | set(server)
    wait_until(lambda: not any(running(pid) for pid in started_here), "every process it started to end",
               timeout=10)
    assert not Path(directory).exists(), "the throwaway server's directory is deleted"


# --- the cold-start benchmark (issue 24) ---------------------------------------------------

def reports_as_it_stops(task: Task, signals: Signals) -> None:
    """A driver that reports one sample only once told to stop (its
    totals, say)."""
    signals.ready()
    signals.stop.wait()
    signals.sample(task.worker)


def test_every_sample_sent_as_the_drivers_stop_arrives() -> None:
    # Run.close() used to drop the samples it took in while it waited for the
    # drivers to end: whether one came in then was a matter of timing.
    for _ in range(5):
        tasks = [Task("", "", 1, f"driver-{k}") for k in range(4)]
        with Run([Role(reports_as_it_stops, tasks)], timeout=30) as run:
            pass
        found: list[object] = []
        for _ in range(100):
            found += run.drain_samples()
            if len(found) >= len(tasks):
                break
            time.sleep(0.02)
        assert sorted(map(str, found)) == [task.worker for task in tasks]


@pytest.mark.parametrize(("argv", "message"), [
    (["--jobs", "0"], "argument --jobs: must be at least 1, got 0"),
    (["--jobs", "many"], "argument --jobs: expected a whole number, got 'many'"),
    (["--workers", "0"], "argument --workers: expected comma-separated counts of at least 1"),
    (["--workers", "4,x"], "argument --workers: expected comma-separated integers, got '4,x'"),
    (["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    (["--min-vs-pgmq", "-1"], "argument --min-vs-pgmq: must be a finite ratio of at least 0, got -1"),
    (["--min-cold-warm", "nan"], "argument --min-cold-warm: must be a finite ratio of at least 0, got nan"),
    (["--min-cold-warm", "most"], "argument --min-cold-warm: expected a ratio such as 0.9, got 'most'"),
])
def test_the_cold_start_benchmark_refuses_bad_arguments(argv: list[str], message: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cold_start.main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("bench_args", "expected"), [
    ([], "-m pyqueue.bench.cold_start  || status=1"),
    (["BENCH_ARGS=--quick"], "-m pyqueue.bench.cold_start --quick || status=1")])
def test_make_bench_runs_the_cold_start(bench_args: list[str], expected: str) -> None:
    shown = subprocess.run(["make", "-n", "-C", str(Path(__file__).resolve().parent.parent), "bench",
                            *bench_args], capture_output=True, text=True, check=True,
                           env={**os.environ, "MAKEFLAGS": ""}).stdout
    assert expected in shown, shown


@pytest.mark.parametrize("name", ["floor", "pgmq", "jobq_sql"])
def test_a_burst_goes_in_with_autovacuum_off_and_the_table_gets_its_own_settings_back(conn: Conn,
                                                                                    name: str) -> None:
    system = cold_systems.BY_NAME[name]
    if name != "jobq_sql":  # this test's database has jobq already
        system.setup(conn)

    def options() -> list[str]:
        return list(scalar(conn, "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = %s::regclass",
                           (system.table,)))

    own = options()
    cold_start.burst(conn, system, 500)
    assert scalar(conn, f"SELECT count(*) FROM {system.table}") == 500
    assert options() == [*own, "autovacuum_enabled=off"]
    cold_start.release_autovacuum(conn, system)
    assert options() == own
    if name == "jobq_sql":
        assert "fillfactor=40" in own  # jobq's own settings, kept


def cold_databases(admin: str) -> list[str]:
    with psycopg.connect(admin, autocommit=True) as conn:
        return [str(row[0]) for row in conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'jobq\\_cold\\_%' ORDER BY 1").fetchall()]


def tiny_cold_start(admin: str, directory: Path, *goals: str) -> tuple[int, str, dict[str, Any]]:
    """A cold start of 300 jobs with 2 processes, one round, on the test
    server: its exit code, what it printed and its JSON."""
    json_path = directory / "cold.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cold_start.main(["--dsn", admin, "--jobs", "300", "--workers", "2", "--rounds", "1", *goals,
                                "--json", str(json_path)])
    return code, printed.getvalue(), json.loads(json_path.read_text())


def test_a_tiny_cold_start_prints_every_row_and_fails_when_a_goal_is_missed(
        postgresql_proc: PostgreSQLExecutor, tmp_path: Path) -> None:
    admin = proc_dsn(postgresql_proc, "postgres")
    code, printed, results = tiny_cold_start(admin, tmp_path, "--min-vs-pgmq", "1000")
    assert code == 1, printed
    rows = results["workers"]["2"]
    assert list(rows) == ["floor", "pgmq", "jobq_sql", "pyqueue"]
    for name, row in rows.items():
        assert results["systems"][name] in printed
        for phase in ("cold", "warm"):
            assert row[phase]["jobs"] == 300 and row[phase]["jobs_per_s"] > 0, (name, phase, row)
            assert row[phase]["runs_jobs_per_s"] == [row[phase]["jobs_per_s"]]
        assert row["cold_vs_warm"] == round(row["cold"]["jobs_per_s"] / row["warm"]["jobs_per_s"], 3)
    assert rows["floor"]["cold"]["ratio_to_floor"] == rows["pgmq"]["warm"]["ratio_to_pgmq"] == 1.0
    assert rows["pyqueue"]["cold"]["startup_s"] > 0
    assert rows["pyqueue"]["cold"]["handled_s"] <= rows["pyqueue"]["cold"]["seconds"]
    assert all(row["cold"]["analyzed_before"] is False for row in rows.values())  # fresh: never analyzed
    assert rows["floor"]["warm"]["analyzed_before"] is True  # ANALYZE before the warm drain
    goal = results["goals"]["pyqueue_vs_pgmq_w2"]
    assert goal["min"] == 1000 and goal["met"] is False and results["ok"] is False
    assert "pyqueue.Worker ÷ pgmq-style, cold, W=2" in printed and "NOT met" in printed
    assert "NOT met, pyqueue.Worker ÷ pgmq-style, cold, W=2" in printed  # and why
    assert "jobq's SQL alone drained the cold burst at" in printed
    assert "in a never-analyzed table of 300 ready jobs" in printed
    # the statement that picks (SKIP LOCKED) reads jobq._job (since 0.10.0 the lease UPDATE is another one)
    assert any(str(node["on"] or "").startswith("_job") for node in results["claim_plan_cold"]["nodes"])
    assert cold_databases(admin) == [], "its databases are dropped"

    code, printed, results = tiny_cold_start(admin, tmp_path, "--min-vs-pgmq", "0", "--min-cold-warm", "0",
                                             "--hold-autovacuum")
    assert code == 0, printed
    assert results["ok"] is True and "NOT met" not in printed
    assert results["settings"]["hold_autovacuum"] is True
    assert "held off each table until its cold drain was over" in printed
    for row in results["workers"]["2"].values():
        cold = row["cold"]
        assert cold["runs_analyzed_before"] == [False] and cold["runs_analyzed_after_s"] == [None], row
    assert set(results["goals"]) == {"pyqueue_vs_pgmq_w2", "jobq_sql_cold_vs_warm_w2",
                                     "pyqueue_cold_vs_warm_w2"}


def test_the_cold_start_benchmark_stopped_by_sigterm_stops_what_it_started(tmp_path: Path) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-m", "pyqueue.bench.cold_start", "--jobs", "200000", "--workers", "2",
         "--rounds", "1", "--json", str(tmp_path / "cold.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert bench.stderr is not None
        first = bench.stderr.readline()
        started = re.search(r"starting a throwaway PostgreSQL server in (\S+)", first)
        assert started, first
        directory = started.group(1)
        dsn = f"host={directory} port={LOCAL_PORT} user=postgres dbname={LOCAL_DATABASE}"

        def draining() -> bool:  # the floor's two drivers connected to its fresh database
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                    return bool(scalar(conn, "SELECT count(*) >= 3 FROM pg_stat_activity "
                                             "WHERE datname = 'jobq_cold_floor_w2'"))
            except psycopg.Error:
                return False

        wait_until(draining, "the floor's drain to run", timeout=120)
        below = descendants(bench.pid)
        server = processes_mentioning(directory)
        assert len(below) >= 3 and server, (below, server)  # forkserver, 2 drivers; the server
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=90)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM: stopping the drivers and the servers first" in err
    started_here = below | set(server)
    wait_until(lambda: not any(running(pid) for pid in started_here), "every process it started to end",
               timeout=10)
    assert not Path(directory).exists(), "the throwaway server's directory is deleted"


def test_the_tracing_cost_benchmark_drains_every_variant_and_cleans_up(conn: Conn, dsn: str) -> None:
    """Issue 27: before (a checkout, here this one, with its SQL in a database
    of its own), off and on, each with a Worker and an AsyncWorker."""
    tiny = tracing_cost.Settings(jobs=100, batch=50, concurrency=2, rounds=1, warm_up=False)
    result = tracing_cost.run(dsn, ROOT, tiny)
    assert set(result["rates"]) == {f"{v}/{k}" for v in ("before", "off", "on") for k in ("sync", "async")}
    assert all(len(rates) == 1 and rates[0] > 0 for rates in result["rates"].values())
    assert set(result["ratios"]) == {"off/sync ÷ before/sync", "on/sync ÷ off/sync",
                                     "off/async ÷ before/async", "on/async ÷ off/async"}
    assert "on/async ÷ off/async" in tracing_cost.summary(result)
    assert scalar(conn, "SELECT count(*) FROM jobq._job") == 0
    assert scalar(conn, "SELECT count(*) FROM pg_database WHERE datname = %s",
                  (tracing_cost.BEFORE_DATABASE,)) == 0
