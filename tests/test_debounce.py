"""Debounce under races (issue 28): 8 producer processes enqueue the same
job_key with on_duplicate 'replace' while worker processes claim it
(tests/debounce_programs.py), on a real server.

What every run must show: no producer sees an error (no deadlock, no unique
violation); every job id an enqueue returned runs exactly once, and with the
payload of the last committed enqueue that returned it (a replace either
changes the job before a claim sees it, or finds it running and makes a new
job); the last committed payload of all runs. With a delay (debounce), a
burst shorter than the delay makes exactly one job, run once, per quiet
period. The transitions one by one are in pgtap/debounce.sql."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import _statements as statements
from pyqueue import aio, errors
from tests.chaos_support import scaled
from tests.debounce_programs import TABLES_DDL
from tests.worker_support import wait_until

Conn = psycopg.Connection[Any]
ROOT = Path(__file__).resolve().parent.parent
PRODUCERS = 8
WORKERS = 3


def scalar(conn: Conn, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


class Programs:
    """The child processes of one test, each logging to its own file."""

    def __init__(self, dsn: str, tmp_path: Path) -> None:
        self.dsn, self.tmp_path = dsn, tmp_path
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.tmp_path / f"program-{len(self.procs)}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "tests.debounce_programs", self.dsn, *args],
                                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append((proc, log))
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        return next(log for p, log in self.procs if p is proc).read_text(errors="replace")

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def programs(conn: Conn, dsn: str, tmp_path: Path) -> Iterator[Programs]:
    conn.execute(TABLES_DDL)
    started = Programs(dsn, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


class Producers:
    """PRODUCERS processes, each enqueueing ``count`` times per round; a
    round's bursts start at once."""

    def __init__(self, programs: Programs, rounds: int, count: int, delay: float) -> None:
        self.programs, self.go = programs, programs.tmp_path / "go"
        self.procs = [programs.start("produce", "--producer", str(p), "--rounds", str(rounds),
                                     "--count", str(count), "--delay", str(delay), "--go", str(self.go))
                      for p in range(PRODUCERS)]
        wait_until(lambda: all(Path(f"{self.go}.ready.{p}").exists() or proc.poll() is not None
                               for p, proc in enumerate(self.procs)), "the producers to connect")

    def burst(self, round_no: int) -> None:
        """Start round ``round_no`` and wait until every producer is done with it."""
        Path(f"{self.go}-{round_no}").touch()
        wait_until(lambda: all(Path(f"{self.go}-{round_no}.{p}").exists() or proc.poll() is not None
                               for p, proc in enumerate(self.procs)), f"the producers' round {round_no}")
        for proc in self.procs:
            assert proc.poll() in {None, 0}, self.programs.output(proc)

    def finish(self) -> None:
        for proc in self.procs:  # no deadlock, no unique violation: every producer exits cleanly
            assert proc.wait(timeout=60) == 0, self.programs.output(proc)


def start_workers(programs: Programs, work: float) -> Path:
    stop = programs.tmp_path / "stop"
    for _ in range(WORKERS):
        programs.start("work", "--stop", str(stop), "--work", str(work))
    return stop


def drained(conn: Conn) -> bool:
    return bool(scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'deb'") == 0)


def assert_each_job_ran_once_with_its_last_payload(conn: Conn) -> None:
    """Every id an enqueue returned ran exactly once, nothing else ran, and
    it ran with the token of the last committed enqueue that returned it."""
    twice = conn.execute("SELECT job_id, count(*) FROM deb_runs "
                         "GROUP BY job_id HAVING count(*) > 1").fetchall()
    assert twice == [], "a job ran more than once"
    never = conn.execute("SELECT DISTINCT job_id FROM deb_log EXCEPT SELECT job_id FROM deb_runs").fetchall()
    assert never == [], "a job an enqueue returned never ran (lost)"
    stray = conn.execute("SELECT job_id FROM deb_runs EXCEPT SELECT job_id FROM deb_log").fetchall()
    assert stray == [], "a job ran that no enqueue returned"
    stale = conn.execute("""
        SELECT r.job_id, r.token AS ran, l.token AS last_committed
        FROM deb_runs AS r
        JOIN (SELECT DISTINCT ON (job_id) job_id, token FROM deb_log ORDER BY job_id, n DESC) AS l
          USING (job_id)
        WHERE r.token <> l.token""").fetchall()
    assert stale == [], "a job ran with a payload that was not the last committed one for it"
    last = scalar(conn, "SELECT token FROM deb_log ORDER BY n DESC LIMIT 1")
    assert scalar(conn, "SELECT count(*) FROM deb_runs WHERE token = %s", (last,)) == 1, \
        "the last committed payload of all ran"


def test_debounce_runs_one_job_per_quiet_period_with_the_last_committed_payload(
    conn: Conn, programs: Programs
) -> None:
    # seconds: each enqueue pushes the run back this far. One job per quiet
    # period needs bursts shorter than the delay (asserted below): 4 s leaves
    # room for 8 producers on a machine busy with the parallel tests.
    delay = 4.0
    rounds, count = scaled(2), 4  # make chaos: more rounds
    stop = start_workers(programs, work=0.0)
    producers = Producers(programs, rounds, count, delay)
    for round_no in range(rounds):
        producers.burst(round_no)
        wait_until(lambda: drained(conn), f"round {round_no}'s job to run")
    producers.finish()
    stop.touch()
    spans = conn.execute("SELECT round, extract(epoch FROM max(at) - min(at))::float8 FROM deb_log "
                         "GROUP BY round ORDER BY round").fetchall()
    print(f"debounce: {rounds} rounds of {PRODUCERS}x{count} enqueues, burst spans (s): "
          f"{[round(s, 3) for _, s in spans]}, delay {delay} s")
    assert all(span < delay for _, span in spans), "setup: every burst is shorter than the delay"
    assert_each_job_ran_once_with_its_last_payload(conn)
    per_round = conn.execute("""
        SELECT l.round, count(DISTINCT r.job_id), max(l.n)
        FROM deb_log AS l LEFT JOIN deb_runs AS r USING (job_id)
        GROUP BY l.round ORDER BY l.round""").fetchall()
    assert [row[1] for row in per_round] == [1] * rounds, "exactly one job ran per quiet period"
    for round_no, _, last_n in per_round:
        last = scalar(conn, "SELECT token FROM deb_log WHERE n = %s", (last_n,))
        assert scalar(conn, "SELECT count(*) FROM deb_runs WHERE token = %s", (last,)) == 1, \
            f"round {round_no} ran with its last committed payload"


def test_replace_racing_with_claims_loses_and_duplicates_nothing(conn: Conn, programs: Programs) -> None:
    # No delay: the job is due at once, so workers claim it while the
    # producers replace it, and many replaces find it running (a new job).
    stop = start_workers(programs, work=0.02)
    count = scaled(15)  # per producer; make chaos: more
    producers = Producers(programs, 1, count, 0.0)
    producers.burst(0)
    producers.finish()
    wait_until(lambda: drained(conn), "every job to run")
    stop.touch()
    enqueues, jobs, runs = conn.execute(
        "SELECT (SELECT count(*) FROM deb_log), (SELECT count(DISTINCT job_id) FROM deb_log), "
        "(SELECT count(*) FROM deb_runs)").fetchone() or (0, 0, 0)
    print(f"replace under claims: {enqueues} enqueues made {jobs} jobs, {runs} runs")
    assert enqueues == PRODUCERS * count
    assert_each_job_ran_once_with_its_last_payload(conn)
    assert jobs > 1, "setup: some replaces found the job running (the race was exercised)"
    assert jobs < enqueues, "setup: some replaces changed a waiting job"
    assert scalar(conn, "SELECT count(*) FROM jobq._job") == 0


def test_pyqueue_passes_on_duplicate_sync_and_async(conn: Conn, dsn: str) -> None:
    first = pyqueue.enqueue(conn, "pyd", {"v": 1}, delay=60, key="k", on_duplicate="replace")
    again = pyqueue.enqueue(conn, "pyd", {"v": 2}, delay=120, priority=3, key="k", on_duplicate="replace")
    assert again == first
    assert pyqueue.enqueue(conn, "pyd", {"v": 3}, delay=600, key="k", on_duplicate="replace_payload") == first
    assert pyqueue.enqueue(conn, "pyd", {"v": 4}, key="k") == first  # keep, the default
    row = conn.execute("SELECT payload, priority, run_at - now() < interval '130 seconds' FROM jobq._job "
                       "WHERE id = %s", (first,)).fetchone()
    assert row == ({"v": 3}, 3, True), "replace took payload, run_at, priority; replace_payload the payload"

    async def twins() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            one = await aio.enqueue(aconn, "pyd", {"v": 5}, key="k", on_duplicate="replace")
            many = await aio.enqueue_many(aconn, "pyd", [{"v": 6}, {"v": 7}], keys=["k", "k2"],
                                          on_duplicate="replace_payload")
            return [one, *many]

    ids = asyncio.run(twins())
    assert ids[:2] == [first, first] and ids[2] != first
    assert scalar(conn, "SELECT payload FROM jobq._job WHERE id = %s", (first,)) == {"v": 6}
    # The default sends no on_duplicate (the same call works on a jobq before 0.12.0).
    assert "on_duplicate" not in statements.enqueue("pyd", {}, key="k").sql
    assert "on_duplicate" in statements.enqueue("pyd", {}, key="k", on_duplicate="replace").sql
    # Bad values: the database's typed errors, nothing changed.
    before = conn.execute("SELECT count(*), max(id) FROM jobq._job").fetchone()
    with pytest.raises(errors.InvalidArgument, match="on_duplicate"):
        pyqueue.enqueue(conn, "pyd", {}, key="k", on_duplicate="merge")
    conn.rollback()
    with pytest.raises(errors.InvalidJobKey, match="job_key"):
        pyqueue.enqueue(conn, "pyd", {}, on_duplicate="replace")
    conn.rollback()
    with pytest.raises(errors.InvalidJobKey, match="job_keys"):
        pyqueue.enqueue_many(conn, "pyd", [{}], on_duplicate="replace")
    conn.rollback()
    assert conn.execute("SELECT count(*), max(id) FROM jobq._job").fetchone() == before


def test_the_cli_takes_on_duplicate(conn: Conn, dsn: str) -> None:
    def cli(*args: str) -> int:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run([sys.executable, "-m", "pyqueue", "enqueue", "--dsn", dsn, *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    first = cli("clid", '{"v": 1}', "--key", "k", "--delay", "30")
    assert cli("clid", '{"v": 2}', "--key", "k", "--on-duplicate", "replace") == first
    assert scalar(conn, "SELECT payload FROM jobq._job WHERE id = %s", (first,)) == {"v": 2}
