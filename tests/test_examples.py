"""The workers in other languages, run for real against this test's database: examples/node
(node-postgres) and examples/psql (a bash loop around psql). Each drains a batch with two concurrent
processes (node 1,000 jobs; psql 100, as each of its jobs starts a few processes; times
JOBQ_CHAOS_SCALE under `make chaos`), one job failing into a retry, and the database and the workers'
logs show every job finished exactly once. Both go on working after a lost lease; the node worker
wakes on NOTIFY."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from tests.chaos_support import scaled

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / "examples" / "node"
PSQL_WORKER = ROOT / "examples" / "psql" / "worker.sh"
Conn = psycopg.Connection[tuple[object, ...]]

QUEUE = "examples"
# The application_name of every example worker's sessions (node-<pid>, psql, java-<pid>, ...).
WORKER_SESSIONS = "^(node-|psql|java-|ruby-|asyncpg-|postgresjs-)"
NODE_JOBS = scaled(1000)
PSQL_JOBS = scaled(100)  # a psql worker starts a psql (and the handler's bash) per job: make chaos, 1,000
WAIT = 300.0  # seconds: generous, never a time bound on the workers (the machine is shared)
EXIT_WAIT = 60.0  # seconds a worker may take to exit after SIGTERM
# The psql worker's command, which does what the node example's handler does: the payload on stdin,
# the attempt in JOBQ_ATTEMPT.
PSQL_HANDLER = (
    "payload=$(cat); sleep_ms='\"sleep_ms\": ([0-9]+)'; "
    'if [[ $payload =~ $sleep_ms ]]; then sleep "$((BASH_REMATCH[1] / 1000))"; fi; '
    'if [[ $payload == *fail_once* && $JOBQ_ATTEMPT == 1 ]]; then '
    'echo "failing the first attempt, as asked" >&2; exit 1; fi'
)


class WorkerProcess:
    """One example worker as a real process, its output in a log file."""

    def __init__(self, argv: list[str], log: Path, database_url: str, cwd: Path, **settings: str) -> None:
        self.log = log
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "DATABASE_URL": database_url, **settings}
        with log.open("w") as out:
            self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text()

    def logged(self, pattern: str) -> bool:
        return re.search(pattern, self.text(), re.MULTILINE) is not None

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        """SIGTERM, then the exit status."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit()

    def wait_exit(self) -> int:
        try:
            return self.process.wait(EXIT_WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"worker did not exit within {EXIT_WAIT:.0f} s:\n{self.text()}") from None


Start = Callable[..., WorkerProcess]  # a fixture's function that starts one more worker


def database_url(dsn: str) -> str:
    """The libpq URL of a key/value DSN: what both workers take as DATABASE_URL."""
    params = conninfo_to_dict(dsn)
    user, host, port, dbname = (str(params[k]) for k in ("user", "host", "port", "dbname"))
    if host.startswith("/"):  # a socket directory goes in the query string
        return f"postgresql://{quote(user)}@/{quote(dbname)}?host={quote(host)}&port={port}"
    return f"postgresql://{quote(user)}@{host}:{port}/{quote(dbname)}"


def scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def wait_until(condition: Callable[[], bool], what: str, workers: list[WorkerProcess]) -> None:
    """Poll until true; fail at once if a worker died, or after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not condition():
        for worker in workers:
            assert worker.alive() or worker.process.returncode == 0, (
                f"a worker exited with {worker.process.returncode} while waiting for {what}:\n{worker.text()}"
            )
        assert time.monotonic() < deadline, f"timed out after {WAIT:.0f} s waiting for {what}"
        time.sleep(0.1)


def keep_history(conn: Conn) -> None:
    """Completed jobs stay in the archive (so the test can count them), and a failed job is retried soon."""
    conn.execute("SELECT jobq.configure_queue(%s, retention => '1 day', backoff_base => '0.2 seconds')",
                 (QUEUE,))


def enqueue_batch(conn: Conn, jobs: int) -> tuple[list[int], int]:
    """``jobs`` jobs in one statement, the middle one failing its first attempt; their ids and that one's."""
    failing = jobs // 2
    payloads = [{"fail_once": True} if n == failing else {"n": n} for n in range(jobs)]
    rows = conn.execute("SELECT jobq.enqueue_many(%s, %s::jsonb[])",
                        (QUEUE, [Jsonb(p) for p in payloads])).fetchall()
    ids = [int(str(row[0])) for row in rows]
    assert len(ids) == jobs
    return ids, ids[failing]


def count_calls(conn: Conn) -> None:
    """Sessions that connect from now on count their function calls (pg_stat_user_functions)."""
    database = sql.Identifier(conn.info.dbname)
    conn.execute(sql.SQL("ALTER DATABASE {} SET track_functions = 'all'").format(database))


def acknowledgements(conn: Conn) -> tuple[int, int]:
    """How many times jobq.complete and jobq.fail ran (their uuid overloads, which the text ones call),
    once every other session of the database has ended: a session flushes its counts as it exits."""
    workers = ("SELECT count(*) FROM pg_stat_activity"
               " WHERE datname = current_database() AND application_name ~ %s")
    wait_until(lambda: scalar(conn, workers, (WORKER_SESSIONS,)) == 0, "the workers' sessions to end", [])
    conn.execute("SELECT pg_stat_clear_snapshot()")
    calls = conn.execute(
        "SELECT coalesce(sum(calls) FILTER (WHERE funcid = 'jobq.complete(bigint, uuid, jsonb)'"
        "::regprocedure), 0),"
        "       coalesce(sum(calls) FILTER (WHERE funcid = 'jobq.fail(bigint, text, uuid, timestamptz)'"
        "::regprocedure), 0)"
        " FROM pg_stat_user_functions").fetchone()
    assert calls is not None
    return int(str(calls[0])), int(str(calls[1]))


def drained(conn: Conn, jobs: int) -> bool:
    """No job of the queue is ready, scheduled or running, and all ``jobs`` are finished."""
    live, finished = conn.execute(
        "SELECT count(*) FILTER (WHERE status IN ('ready', 'scheduled', 'running')),"
        "       count(*) FILTER (WHERE status IN ('completed', 'dead', 'cancelled'))"
        " FROM jobq.jobs WHERE queue = %s", (QUEUE,)).fetchone() or (None, None)
    return live == 0 and finished == jobs


def completed_ids(workers: list[WorkerProcess]) -> Counter[int]:
    """How many times the workers' logs say each job was completed."""
    found = (re.findall(r"completed job (\d+)$", w.text(), re.MULTILINE) for w in workers)
    return Counter(int(job_id) for ids in found for job_id in ids)


def assert_each_job_finished_once(conn: Conn, ids: list[int], failing: int,
                                  workers: list[WorkerProcess]) -> None:
    rows = conn.execute("SELECT id, status, attempts, last_error FROM jobq.jobs WHERE queue = %s ORDER BY id",
                        (QUEUE,)).fetchall()
    assert [int(str(r[0])) for r in rows] == sorted(ids), "the archive holds each job once, and only these"
    assert {r[1] for r in rows} == {"completed"}
    attempts = {int(str(r[0])): r[2] for r in rows}
    assert attempts[failing] == 2, "the failing job ran twice: its failure, then its retry"
    assert {a for i, a in attempts.items() if i != failing} == {1}, "every other job ran exactly once"
    errors = {int(str(r[0])): r[3] for r in rows}
    assert "failing the first attempt, as asked" in str(errors[failing])
    stats = conn.execute("SELECT dead, completed_total, failed_total FROM jobq.stats WHERE queue = %s",
                         (QUEUE,)).fetchone()
    assert stats == (0, len(ids), 1), "nothing dead, each job completed once, one failed attempt"

    done = completed_ids(workers)
    assert [i for i, n in done.items() if n > 1] == [], "no job was reported completed twice"
    assert sorted(done) == sorted(ids), "the workers completed every job"
    failures = [w.text().count(f"failed job {failing} (attempt 1)") for w in workers]
    assert sum(failures) == 1, "the failing job failed once, in one worker"
    assert not any(w.logged("lease lost") for w in workers), "no lease was lost"
    assert all(done_by(w) > 0 for w in workers), "both workers took part"
    assert acknowledgements(conn) == (len(ids), 1), "one complete per job, one fail in all"


def done_by(worker: WorkerProcess) -> int:
    return len(re.findall(r"completed job \d+$", worker.text(), re.MULTILINE))


@pytest.fixture
def url(dsn: str) -> str:
    return database_url(dsn)


@pytest.fixture
def node_workers(url: str, tmp_path: Path) -> Iterator[Start]:
    """Starts examples/node/worker.js processes on QUEUE; kills any left running at the end."""
    node = shutil.which("node")
    assert node is not None, "node is not installed (make deps)"
    assert (NODE_DIR / "node_modules" / "pg").is_dir(), "no examples/node/node_modules: make examples-deps"
    started: list[WorkerProcess] = []

    def start(**settings: str) -> WorkerProcess:
        log = tmp_path / f"node-{len(started)}.log"
        started.append(WorkerProcess([node, "worker.js", QUEUE], log, url, NODE_DIR, **settings))
        return started[-1]

    yield start
    for worker in started:
        if worker.alive():
            worker.process.kill()
            worker.process.wait()


@pytest.fixture
def psql_workers(url: str, tmp_path: Path) -> Iterator[Start]:
    """Starts examples/psql/worker.sh processes on QUEUE; kills any left running at the end."""
    assert shutil.which("psql") is not None, "psql is not installed (make deps)"
    started: list[WorkerProcess] = []

    def start(*options: str, **settings: str) -> WorkerProcess:
        log = tmp_path / f"psql-{len(started)}.log"
        argv = ["bash", str(PSQL_WORKER), *options, QUEUE, "bash", "-c", PSQL_HANDLER]
        started.append(WorkerProcess(argv, log, url, tmp_path, **settings))
        return started[-1]

    yield start
    for worker in started:
        if worker.alive():
            worker.process.kill()
            worker.process.wait()


def test_node_workers_finish_each_job_exactly_once(conn: Conn, node_workers: Start) -> None:
    keep_history(conn)
    count_calls(conn)
    workers = [node_workers(JOBQ_POLL_SECONDS="1") for _ in range(2)]
    wait_until(lambda: all(w.logged("idle: waiting for NOTIFY") for w in workers), "idle workers", workers)
    ids, failing = enqueue_batch(conn, NODE_JOBS)
    wait_until(lambda: drained(conn, NODE_JOBS), f"{NODE_JOBS} jobs finished", workers)
    assert [w.stop() for w in workers] == [0, 0]
    assert all(w.logged("stopped$") for w in workers)
    assert_each_job_finished_once(conn, ids, failing, workers)


def test_psql_workers_finish_each_job_exactly_once(conn: Conn, psql_workers: Start) -> None:
    keep_history(conn)
    count_calls(conn)
    ids, failing = enqueue_batch(conn, PSQL_JOBS)
    # One stops by itself when the queue is empty, the other when told to (SIGTERM).
    until_empty = psql_workers("--until-empty", JOBQ_POLL_SECONDS="0.5")
    until_told = psql_workers(JOBQ_POLL_SECONDS="0.5")
    workers = [until_empty, until_told]
    wait_until(lambda: drained(conn, PSQL_JOBS), f"{PSQL_JOBS} jobs finished", workers)
    assert until_told.stop() == 0
    assert until_empty.wait_exit() == 0
    assert until_empty.logged(f"queue {QUEUE} is empty$")
    assert all(w.logged("stopped$") for w in workers)
    assert_each_job_finished_once(conn, ids, failing, workers)
    # The log line gives the reason (issue 29), not only "failed job N".
    assert any(w.logged(f"failed job {failing} \\(attempt 1\\): failing the first attempt, as asked$")
               for w in workers)


def test_node_worker_wakes_on_notify(conn: Conn, node_workers: Start) -> None:
    """With a poll interval far longer than the wait, only the NOTIFY can bring the job in."""
    keep_history(conn)
    worker = node_workers(JOBQ_POLL_SECONDS="3600")
    wait_until(lambda: worker.logged("idle: waiting for NOTIFY"), "the worker idle", [worker])
    job_id = scalar(conn, "SELECT jobq.enqueue(%s, '{\"hello\": \"world\"}')", (QUEUE,))
    wait_until(lambda: worker.logged(f"completed job {job_id}$"), "the job completed", [worker])
    log = worker.text()
    assert log.index("woken by NOTIFY") < log.index(f"completed job {job_id}")
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "completed"
    assert worker.stop() == 0


@pytest.mark.parametrize("kind", ["node", "psql"])
def test_worker_survives_a_lost_lease(conn: Conn, kind: str, request: pytest.FixtureRequest) -> None:
    """The lease expires while the handler runs; jobq reaps the job and another holder claims it.
    The worker's late complete returns false and changes nothing; it logs that and goes on working."""
    keep_history(conn)
    start: Start = request.getfixturevalue(f"{kind}_workers")
    worker = start(JOBQ_POLL_SECONDS="3600" if kind == "node" else "0.5", JOBQ_LEASE="1 second")
    wait_until(lambda: worker.logged("idle: waiting for NOTIFY|working on queue"), "a ready worker", [worker])
    slow = scalar(conn, "SELECT jobq.enqueue(%s, '{\"sleep_ms\": 6000}')", (QUEUE,))
    wait_until(lambda: scalar(conn, "SELECT status = 'running' AND lease_expires_at < clock_timestamp()"
                                    " FROM jobq.jobs WHERE id = %s", (slow,)), "the lease expired", [worker])
    with conn.transaction():  # reap it and take it over before the worker could claim it again
        assert scalar(conn, "SELECT jobq.reap()") == 1
        token = scalar(conn, "SELECT lease_token FROM jobq.claim(%s, 1, 'the-new-holder', '1 hour')",
                       (QUEUE,))
    wait_until(lambda: worker.logged(f"lease lost on job {slow}\\b"), "the worker's late complete", [worker])
    assert worker.alive()
    assert scalar(conn, "SELECT status || ' ' || worker FROM jobq.jobs WHERE id = %s", (slow,)) \
        == "running the-new-holder", "the late complete changed nothing"
    assert not worker.logged(f"completed job {slow}$")

    after = scalar(conn, "SELECT jobq.enqueue(%s, '{}')", (QUEUE,))
    wait_until(lambda: worker.logged(f"completed job {after}$"), "the next job completed", [worker])
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", (slow, token)) is True
    assert conn.execute("SELECT status, attempts FROM jobq.jobs WHERE id = %s", (slow,)).fetchone() \
        == ("completed", 2)
    assert worker.stop() == 0
