"""The workers written with typed drivers, run for real against this test's database: examples/java
(JDBC), examples/ruby (ruby-pg), examples/asyncpg and examples/postgresjs. Each drains 1,000 jobs with two
concurrent processes woken by NOTIFY: one job fails its first attempt into a retry, one heart-beats
while it works, and the database and the workers' logs show every job finished exactly once. They use
the statements docs/sql.md gives for their driver, with no casts but those its "Typed drivers" table
lists."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.chaos_support import scaled
from tests.test_examples import (
    QUEUE,
    Start,
    WorkerProcess,
    assert_each_job_finished_once,
    count_calls,
    drained,
    keep_history,
    scalar,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
JOBS = scaled(1000)
JDBC_JAR = Path("/usr/share/java/postgresql.jar")  # Debian's libpostgresql-jdbc-java
Conn = psycopg.Connection[tuple[object, ...]]


def commands(kind: str) -> tuple[list[str], Path]:
    """The argv (before the queue) of one worker of ``kind``, and its directory. A missing tool fails the
    test with what installs it. The Java worker runs as make examples-deps compiled it (a JVM that
    compiles the source at each start, `java Worker.java`, takes seconds more)."""
    directory = EXAMPLES / kind
    if kind == "java":
        assert JDBC_JAR.is_file(), f"no {JDBC_JAR}: make deps (libpostgresql-jdbc-java)"
        built = directory / "build" / "Worker.class"
        assert built.is_file() and built.stat().st_mtime >= (directory / "Worker.java").stat().st_mtime, \
            "examples/java/build is missing or older than Worker.java: make examples-deps"
        classpath = f"{JDBC_JAR}:{directory / 'build'}"
        return ["java", "-XX:TieredStopAtLevel=1", "-cp", classpath, "Worker"], directory
    if kind == "ruby":
        assert shutil.which("ruby") is not None, "ruby is not installed: make deps (ruby-pg)"
        return ["ruby", "worker.rb"], directory
    if kind == "asyncpg":
        return [str(ROOT / ".venv" / "bin" / "python"), "worker.py"], directory
    assert (directory / "node_modules" / "postgres").is_dir(), \
        "no examples/postgresjs/node_modules: make examples-deps"
    node = shutil.which("node")
    assert node is not None, "node is not installed (make deps)"
    return [node, "worker.js"], directory


def jdbc_url(dsn: str, conn: Conn) -> str:
    """JDBC speaks TCP only: the test server's 127.0.0.1 port (tests/conftest.py listens there too)."""
    return f"jdbc:postgresql://127.0.0.1:{conn.info.port}/{conn.info.dbname}?user={conn.info.user}"


@pytest.fixture
def workers(dsn: str, conn: Conn, tmp_path: Path) -> Iterator[Start]:
    """Starts example workers of a kind on QUEUE; kills any left running at the end."""
    from tests.test_examples import database_url  # noqa: PLC0415 - one helper, beside its siblings

    started: list[WorkerProcess] = []

    def start(kind: str, **settings: str) -> WorkerProcess:
        argv, directory = commands(kind)
        url = jdbc_url(dsn, conn) if kind == "java" else database_url(dsn)
        log = tmp_path / f"{kind}-{len(started)}.log"
        started.append(WorkerProcess([*argv, QUEUE], log, url, directory, HOME=str(tmp_path), **settings))
        return started[-1]

    yield start
    for worker in started:
        if worker.alive():
            worker.process.kill()
            worker.process.wait()


def enqueue_batch(conn: Conn) -> tuple[list[int], int, int]:
    """JOBS jobs in one statement: the middle one fails its first attempt, the one at a quarter works in
    two steps with a heartbeat after each. Their ids, the failing one's and the heart-beating one's."""
    failing, beating = JOBS // 2, JOBS // 4
    payloads = [{"fail_once": True} if n == failing else {"n": n, "steps": 2} if n == beating else {"n": n}
                for n in range(JOBS)]
    rows = conn.execute("SELECT jobq.enqueue_many(%s, %s::jsonb[])",
                        (QUEUE, [Jsonb(p) for p in payloads])).fetchall()
    ids = [int(str(row[0])) for row in rows]
    return ids, ids[failing], ids[beating]


@pytest.mark.parametrize("kind", ["java", "ruby", "asyncpg", "postgresjs"])
def test_typed_driver_workers_finish_each_job_exactly_once(conn: Conn, workers: Start, kind: str) -> None:
    keep_history(conn)
    count_calls(conn)
    began = time.monotonic()
    pair = [workers(kind, JOBQ_POLL_SECONDS="1") for _ in range(2)]
    wait_until(lambda: all(w.logged("idle: waiting for NOTIFY") for w in pair), "idle workers", pair)
    ids, failing, beating = enqueue_batch(conn)
    wait_until(lambda: drained(conn, JOBS), f"{JOBS} jobs finished", pair)
    assert [w.stop() for w in pair] == [0, 0]
    assert all(w.logged("stopped$") for w in pair)
    assert sum(w.text().count(f"heartbeat on job {beating}\n") for w in pair) == 2, "two steps, two beats"
    assert_each_job_finished_once(conn, ids, failing, pair)  # waits for the workers' counts to arrive
    assert scalar(conn, "SELECT calls FROM pg_stat_user_functions"
                        " WHERE funcid = 'jobq.heartbeat(bigint, uuid, interval)'::regprocedure") == 2
    print(f"{kind}: {JOBS} jobs, two workers, {time.monotonic() - began:.1f} s from start to stop"
          f" (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")  # pytest -s shows it
