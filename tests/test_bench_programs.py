"""The benchmark programs of issue 16 do what they say, on real servers, at a
tiny size and without any timing assertion (their figures are what
``make bench`` prints): the prune comparison empties both archives, the
partitioned copy of the live table runs jobq unchanged, the soak's
verdict catches drift, growth and a slowing pickup, the pooler counts
the round of median ratio and refuses bad sizes, and the Python-side
comparison of issue 24 measures every row and judges every goal. A bench program stopped by
SIGTERM mid-drain stops its driver processes, PgBouncer and its throwaway
server before it exits. (The pooler's drain is exercised by
tests/test_pooler_fleet.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.bench import pooler, prune, python_side, queue_partitions, soak
from pyqueue.bench.suite import LOCAL_DATABASE, LOCAL_PORT
from tests.conftest import proc_dsn
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
    printed = python_side.summary(result)
    assert "one pyqueue.aio.AsyncWorker process" in printed and "time per pyqueue.enqueue" in printed
    assert "against the same SQL by hand" in printed


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
