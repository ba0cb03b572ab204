"""SQL-level workloads of ``pyqueue bench``: the floor (a minimal queue
table with no jobq), jobq driven through SQL alone, and the naive
``FOR UPDATE`` queue (no SKIP LOCKED) of the classic blog posts.

The floor and naive tables live in the scratch schema ``jobq_bench``, jobq's
benchmark jobs in queues named ``bench.*``; both are removed when the run
ends, so a user's database keeps only its own data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pyqueue.bench.harness import BenchError, Loop, Outcome, Role, Run, Signals, Task
from pyqueue.defaults import CHANNEL

BENCH_SCHEMA = "jobq_bench"
SCHEMA_COMMENT = "pyqueue bench scratch schema: created and dropped by each benchmark run"
QUEUE_PREFIX = "bench."
IDLE_WAIT = 0.1  # seconds an idle consumer waits for a NOTIFY before looking again anyway
PREFILL_CHUNK = 50_000  # jobs per prefill statement (jobq.enqueue_many caps a call at 100 000)
CONNECT_OPTIONS: dict[str, Any] = {"autocommit": True, "application_name": "pyqueue-bench"}

Conn = psycopg.Connection[tuple[Any, ...]]

SCHEMA_DDL = f"""
CREATE SCHEMA {BENCH_SCHEMA};
COMMENT ON SCHEMA {BENCH_SCHEMA} IS '{SCHEMA_COMMENT}';
-- The floor: the least a Postgres queue can be. No status, no lease, no
-- history: a job is inserted and deleted.
CREATE TABLE {BENCH_SCHEMA}.floor_job (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload  jsonb NOT NULL
);
-- The naive queue: a status column flipped under SELECT ... FOR UPDATE.
CREATE TABLE {BENCH_SCHEMA}.naive_job (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload    jsonb NOT NULL,
    status     text NOT NULL DEFAULT 'ready',
    locked_at  timestamptz
);
CREATE INDEX naive_job_ready_idx ON {BENCH_SCHEMA}.naive_job (id) WHERE status = 'ready';
-- The pgmq-style reference: a queue table shaped like a pgmq queue (message
-- id, read count, enqueue time, visibility time, message) with pgmq's index
-- on the visibility time, read with a visibility timeout, then deleted.
CREATE TABLE {BENCH_SCHEMA}.pgmq_job (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    read_ct      integer NOT NULL DEFAULT 0,
    enqueued_at  timestamptz NOT NULL DEFAULT now(),
    vt           timestamptz NOT NULL DEFAULT now(),
    payload      jsonb NOT NULL
);
CREATE INDEX pgmq_job_vt_idx ON {BENCH_SCHEMA}.pgmq_job (vt);
"""

FLOOR_CHANNEL = "jobq_bench"  # the floor queue's NOTIFY channel
JOBQ_CHANNEL = CHANNEL  # jobq's: one NOTIFY per queue per inserting statement, payload the queue name
# The floor's producer statement: a batch in, ids back, its consumers woken
# (one NOTIFY per statement, like jobq's trigger).
FLOOR_INSERT = f"""
WITH job AS (INSERT INTO {BENCH_SCHEMA}.floor_job (payload) SELECT unnest(%s::jsonb[]) RETURNING id),
     wake AS (SELECT pg_notify('{FLOOR_CHANNEL}', ''))
SELECT job.id FROM job, wake
"""
FLOOR_DRAIN = f"""
DELETE FROM {BENCH_SCHEMA}.floor_job
WHERE id IN (SELECT id FROM {BENCH_SCHEMA}.floor_job ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, payload
"""
JOBQ_ENQUEUE = "SELECT jobq.enqueue_many(%s, %s::jsonb[])"
JOBQ_CLAIM = "SELECT id, lease_token, payload FROM jobq.claim(%s, %s, %s)"
JOBQ_COMPLETE = "SELECT jobq.complete_many(%s::bigint[], %s::uuid[])"
JOBQ_TAKE = "SELECT id, payload FROM jobq.take(%s, %s)"  # inside the caller's transaction
NAIVE_SELECT = f"""
SELECT id FROM {BENCH_SCHEMA}.naive_job WHERE status = 'ready' ORDER BY id LIMIT %s FOR UPDATE
"""
# The same queue with only SKIP LOCKED added: what skipping alone buys.
SKIP_SELECT = NAIVE_SELECT.replace("FOR UPDATE", "FOR UPDATE SKIP LOCKED")
NAIVE_MARK = f"""
UPDATE {BENCH_SCHEMA}.naive_job SET status = 'running', locked_at = now() WHERE id = ANY(%s)
RETURNING id, payload
"""
NAIVE_DONE = f"DELETE FROM {BENCH_SCHEMA}.naive_job WHERE id = ANY(%s)"
# One job into the floor queue, waking its listeners: what a minimal queue does.
FLOOR_ENQUEUE_ONE = f"""
WITH job AS (INSERT INTO {BENCH_SCHEMA}.floor_job (payload) VALUES (%s) RETURNING id)
SELECT pg_notify('{FLOOR_CHANNEL}', '') FROM job
"""
PAYLOAD_SQL = "jsonb_build_object('n', i, 'kind', 'bench')"


def payload(n: int) -> dict[str, object]:
    """The payload of every benchmark job: small, like a typical job's key."""
    return {"n": n, "kind": "bench"}


def connect(dsn: str) -> Conn:
    return psycopg.connect(dsn, **CONNECT_OPTIONS)


# --- scratch schema and cleanup ----------------------------------------------

def create_schema(conn: Conn) -> None:
    """Create the scratch schema; replace one an interrupted run left behind,
    but never a schema of the same name that a benchmark did not create."""
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
        (BENCH_SCHEMA,)).fetchone()
    if row is not None:
        if row[0] != SCHEMA_COMMENT:
            raise BenchError(f"schema {BENCH_SCHEMA} exists and was not made by pyqueue bench; "
                             "rename it or benchmark another database")
        conn.execute(f"DROP SCHEMA {BENCH_SCHEMA} CASCADE")
    conn.execute(SCHEMA_DDL)


# Every jobq table with a queue column (jobs, history, settings, counters…),
# whatever the installed version has: the bench.* rows go from all of them.
QUEUE_TABLES = """
SELECT format('%I.%I', c.table_schema, c.table_name)
FROM information_schema.columns AS c
JOIN information_schema.tables AS t USING (table_schema, table_name)
WHERE c.table_schema = 'jobq' AND c.column_name = 'queue' AND t.table_type = 'BASE TABLE'
ORDER BY c.table_name
"""


def cleanup(conn: Conn) -> list[str]:
    """Drop the scratch schema and every bench.* row of jobq's tables; return
    what could not be removed. A table another one refers to may refuse
    until the referring rows are gone, so tables that fail are retried."""
    problems: dict[str, str] = {}
    conn.execute(f"DROP SCHEMA IF EXISTS {BENCH_SCHEMA} CASCADE")
    pattern = QUEUE_PREFIX.replace(".", r"\.") + "%"
    pending = [str(row[0]) for row in conn.execute(QUEUE_TABLES).fetchall()]
    for _ in range(len(pending) + 1):
        failed: list[str] = []
        for table in pending:
            try:
                conn.execute(f"DELETE FROM {table} WHERE queue LIKE %s", (pattern,))
                problems.pop(table, None)
            except psycopg.errors.InsufficientPrivilege:
                problems[table] = f"no privilege to delete bench.* rows from {table}"
            except psycopg.errors.IntegrityError as exc:
                problems[table] = f"bench.* rows of {table} are still referred to: {str(exc).strip()}"
                failed.append(table)
        if not failed:
            break
        pending = failed
    return sorted(problems.values())


def vacuum(conn: Conn, *tables: str) -> None:
    """VACUUM ANALYZE between measurements, so each starts without the last
    one's dead rows (a table we do not own is skipped with a warning)."""
    for table in tables:
        conn.execute(f"VACUUM (ANALYZE) {table}")


# --- prefill (not measured) ----------------------------------------------------

def prefill_floor(conn: Conn, table: str, count: int) -> None:
    """Fill a jobq_bench table with ``count`` jobs in a few statements."""
    ident = sql.Identifier(BENCH_SCHEMA, table)
    for start in range(0, count, PREFILL_CHUNK):
        stop = min(count, start + PREFILL_CHUNK)
        statement = sql.SQL("INSERT INTO {} (payload) SELECT " + PAYLOAD_SQL
                            + " FROM generate_series(%s::bigint, %s) AS i").format(ident)
        conn.execute(statement, (start + 1, stop))


def top_up_naive(conn: Conn, depth: int) -> None:
    """Bring the naive queue to ``depth`` ready jobs."""
    row = conn.execute(f"SELECT count(*) FROM {BENCH_SCHEMA}.naive_job WHERE status = 'ready'").fetchone()
    missing = depth - int(row[0] if row else 0)
    if missing > 0:
        prefill_floor(conn, "naive_job", missing)


def top_up_jobq(conn: Conn, queue: str, depth: int) -> None:
    """Bring ``queue`` to ``depth`` ready jobs."""
    row = conn.execute("SELECT count(*) FROM jobq._job WHERE queue = %s AND status = 'ready'",
                       (queue,)).fetchone()
    missing = depth - int(row[0] if row else 0)
    if missing > 0:
        prefill_jobq(conn, queue, missing)


def prefill_jobq(conn: Conn, queue: str, count: int) -> None:
    """Enqueue ``count`` jobs into ``queue`` with a few enqueue_many calls."""
    for start in range(0, count, PREFILL_CHUNK):
        stop = min(count, start + PREFILL_CHUNK)
        conn.execute(
            "SELECT count(*) FROM jobq.enqueue_many(%s, "
            f"(SELECT array_agg({PAYLOAD_SQL} ORDER BY i) FROM generate_series(%s::bigint, %s) AS i))",
            (queue, start + 1, stop))


# --- driver loops (run in their own processes) -----------------------------------

def produce(task: Task, signals: Signals, send: Callable[[Conn, list[int]], object]) -> None:
    """Enqueue ``task.quota`` jobs in batches (at ``task.rate`` jobs/s if set):
    ``send`` adds the jobs of the given payload numbers in one call."""
    with connect(task.dsn) as conn:
        signals.ready()
        done = 0
        started = time.perf_counter()
        while done < task.quota and not signals.stopped:
            size = min(task.batch, task.quota - done)
            send(conn, list(range(done, done + size)))
            done += size
            signals.add(size)
            if task.rate > 0:
                ahead = started + done / task.rate - time.perf_counter()
                if ahead > 0:
                    signals.stop.wait(ahead)


def floor_insert(task: Task, signals: Signals) -> None:
    produce(task, signals, lambda conn, numbers: conn.execute(
        FLOOR_INSERT, ([Jsonb(payload(n)) for n in numbers],)).fetchall())


def jobq_enqueue(task: Task, signals: Signals) -> None:
    produce(task, signals, lambda conn, numbers: conn.execute(
        JOBQ_ENQUEUE, (task.queue, [Jsonb(payload(n)) for n in numbers])).fetchall())


def listening(conn: Conn, channel: str) -> Conn:
    conn.execute(f"LISTEN {channel}")
    return conn


def wait_for_work(conn: Conn) -> None:
    """After a take came back empty: return at once when notifications
    arrived meanwhile, else wait for one (at most IDLE_WAIT seconds). Every
    consumer idles this way, so none of them burns the CPU the producer
    needs by polling."""
    if any(True for _ in conn.notifies(timeout=0)):
        return
    for _ in conn.notifies(timeout=IDLE_WAIT, stop_after=1):
        pass


def floor_drain(task: Task, signals: Signals) -> None:
    """DELETE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) until stopped."""
    with listening(connect(task.dsn), FLOOR_CHANNEL) as conn:
        signals.ready()
        while not signals.stopped:
            rows = conn.execute(FLOOR_DRAIN, (task.batch,)).fetchall()
            if rows:
                signals.add(len(rows))
            else:
                wait_for_work(conn)


def jobq_drain(task: Task, signals: Signals) -> None:
    """jobq.claim(queue, n) then jobq.complete_many(ids, tokens) until stopped."""
    with listening(connect(task.dsn), JOBQ_CHANNEL) as conn:
        signals.ready()
        while not signals.stopped:
            rows = conn.execute(JOBQ_CLAIM, (task.queue, task.batch, task.worker)).fetchall()
            if rows:
                conn.execute(JOBQ_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()
                signals.add(len(rows))
            else:
                wait_for_work(conn)


def naive_drain(task: Task, signals: Signals) -> None:
    """The blog-post queue: BEGIN; SELECT ... FOR UPDATE (no SKIP LOCKED);
    UPDATE status; COMMIT; then DELETE the finished jobs, until stopped."""
    status_flip_drain(task, signals, NAIVE_SELECT)


def skip_locked_drain(task: Task, signals: Signals) -> None:
    """The naive queue with SKIP LOCKED added to its SELECT, nothing else."""
    status_flip_drain(task, signals, SKIP_SELECT)


def status_flip_drain(task: Task, signals: Signals, select: str) -> None:
    """Claim by flipping a status column in a transaction; retry after a
    deadlock (the naive claim deadlocks under contention), counting it."""
    with listening(connect(task.dsn), FLOOR_CHANNEL) as conn:
        signals.ready()
        while not signals.stopped:
            try:
                with conn.transaction():
                    ids = [r[0] for r in conn.execute(select, (task.batch,)).fetchall()]
                    rows = conn.execute(NAIVE_MARK, (ids,)).fetchall() if ids else []
            except psycopg.errors.DeadlockDetected:
                signals.incident()
                continue
            if not rows:
                wait_for_work(conn)
                continue
            # Deleting the finished jobs can deadlock too (with claimers that
            # wait on those rows); counted, then retried until it goes through.
            while True:
                try:
                    conn.execute(NAIVE_DONE, ([r[0] for r in rows],))
                    break
                except psycopg.errors.DeadlockDetected:
                    signals.incident()
            signals.add(len(rows))


# --- measurements ----------------------------------------------------------------

@dataclass(frozen=True)
class Size:
    """How much one fixed-size measurement moves."""

    jobs: int  # jobs in all
    batch: int  # jobs per statement
    timeout: float  # seconds before the measurement counts as stuck


def tasks(dsn: str, queue: str, batch: int, count: int, *, prefix: str, total: int = 0) -> list[Task]:
    """``count`` tasks; producers split ``total`` jobs between them."""
    quotas = [total // count + (1 if k < total % count else 0) for k in range(count)]
    return [Task(dsn, queue, batch, f"{prefix}-{k + 1}", quota=quotas[k]) for k in range(count)]


def produce_outcome(dsn: str, loop: Loop, queue: str, connections: int, size: Size) -> Outcome:
    """Time ``connections`` producers inserting ``size.jobs`` jobs in total."""
    role = Role(loop, tasks(dsn, queue, size.batch, connections, prefix="producer", total=size.jobs))
    with Run([role], timeout=size.timeout) as run:
        return run.until_count(size.jobs)


def drain_outcome(dsn: str, loop: Loop, queue: str, connections: int, size: Size) -> Outcome:
    """Time ``connections`` consumers taking ``size.jobs`` prefilled jobs."""
    role = Role(loop, tasks(dsn, queue, size.batch, connections, prefix="consumer"))
    with Run([role], timeout=size.timeout) as run:
        return run.until_count(size.jobs)


def mixed_outcome(dsn: str, loops: tuple[Loop, Loop], queue: str, consumers: int, size: Size) -> Outcome:
    """Time one producer (``loops[0]``) and ``consumers`` consumers
    (``loops[1]``) running together until ``size.jobs`` jobs went through."""
    producer, consumer = loops
    producers = tasks(dsn, queue, size.batch, 1, prefix="producer", total=size.jobs)
    roles = [Role(producer, producers, counted=False),
             Role(consumer, tasks(dsn, queue, size.batch, consumers, prefix="consumer"))]
    with Run(roles, timeout=size.timeout) as run:
        return run.until_count(size.jobs)


def windowed_outcome(dsn: str, consumer: Loop, queue: str, consumers: int, *, batch: int, seconds: float,
                     warmup: float) -> Outcome:
    """Jobs ``consumers`` consumers take from a prefilled queue in a time window."""
    role = Role(consumer, tasks(dsn, queue, batch, consumers, prefix="consumer"))
    with Run([role], timeout=seconds + warmup + 60) as run:
        return run.for_duration(seconds, warmup=warmup)
