"""The systems of the cold-start benchmark (``pyqueue.bench.cold_start``):
how each one is set up in a fresh database, filled with a burst of jobs,
and drained by worker processes that time themselves.

- ``floor``: ``DELETE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT
  n) RETURNING`` on a plain two-column table (``jobq_bench.floor_job``);
- ``pgmq``: a table shaped like a pgmq 1.5 queue (``msg_id`` identity
  primary key, ``read_ct``, ``enqueued_at``, ``vt``, ``message``,
  ``headers``, and pgmq's index on ``vt``), read and deleted through
  functions of our own that run the statements of pgmq 1.5's ``read`` (the
  oldest visible messages locked with SKIP LOCKED, hidden for ``vt``
  seconds, their read counted) and ``delete`` of an array of ids, as
  dynamic SQL as pgmq does (planned at every call). The pgmq extension is
  not available here; its ``conditional`` filter (empty by default) and its
  archive table (unused by read and delete) are left out;
- ``jobq_sql``: ``jobq.claim(q, n)`` + ``jobq.complete_many``, bare SQL;
- ``pyqueue``: ``pyqueue.Worker`` processes (a no-op handler).

Every driver reads ``time.monotonic()`` (one clock for every process of
the machine): the SQL loops just before their first claim and after each
acknowledgement that took jobs away, and report both when they stop; the
drain is the earliest first claim to the latest acknowledgement. A
``pyqueue.Worker`` shows neither its claims nor its acknowledgements: its
process reports when its handler first and last ran, and when ``run()``
began (it connects, reaps once, LISTENs, then claims: its start-up, which
the report shows apart); its drain runs from the earliest first handler
call (a first claim's return, so one claim later than the SQL loops'
start) to the moment the parent sees the queue empty in the database (it
looks every few milliseconds once every job was handled).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pyqueue
from pyqueue import schema
from pyqueue.bench import sql_loops
from pyqueue.bench.harness import BenchError, Loop, Outcome, Role, Run, Signals, Task

Conn = sql_loops.Conn
QUEUE = f"{sql_loops.QUEUE_PREFIX}cold"  # jobq's queue
PGMQ_QUEUE = "bench"  # the pgmq-style queue: table pgmq_style.q_bench
PGMQ_VISIBILITY = 30  # seconds a read message stays hidden (pgmq read's vt)
IDLE_WAIT = 0.05  # seconds a driver that found nothing waits before it looks again
ACK_POLL = 0.005  # seconds between the parent's looks for a Worker drain's last acknowledgements
SAMPLE_TIMEOUT = 5.0  # seconds to wait for the drivers' clocks after they stopped
PHASES = ("cold", "warm")  # the two drains of a burst: in a fresh database, then once it is analyzed

PGMQ_DDL = f"""
CREATE SCHEMA pgmq_style;
COMMENT ON SCHEMA pgmq_style IS 'pyqueue bench: a queue shaped like pgmq 1.5''s, read and deleted its way';
CREATE TYPE pgmq_style.message_record AS (
    msg_id bigint, read_ct integer, enqueued_at timestamptz, vt timestamptz, message jsonb, headers jsonb);
-- A queue table as pgmq's create_non_partitioned makes it, with its index on vt.
CREATE TABLE pgmq_style.q_{PGMQ_QUEUE} (
    msg_id       bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct      integer DEFAULT 0 NOT NULL,
    enqueued_at  timestamptz DEFAULT now() NOT NULL,
    vt           timestamptz NOT NULL,
    message      jsonb,
    headers      jsonb
);
CREATE INDEX q_{PGMQ_QUEUE}_vt_idx ON pgmq_style.q_{PGMQ_QUEUE} (vt ASC);

CREATE FUNCTION pgmq_style.table_of(queue_name text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    -- The queue's table; a name that could break the dynamic SQL is refused.
    IF queue_name !~ '^[a-z0-9_]+$' THEN
        RAISE EXCEPTION 'queue name % is not a lower-case identifier', queue_name;
    END IF;
    RETURN 'q_' || queue_name;
END $$;

CREATE FUNCTION pgmq_style.read(queue_name text, vt integer, qty integer)
RETURNS SETOF pgmq_style.message_record
LANGUAGE plpgsql AS $$
BEGIN
    -- pgmq 1.5's read: the oldest visible messages, locked with SKIP LOCKED,
    -- hidden for vt seconds and their read counted, in one statement.
    RETURN QUERY EXECUTE format($sql$
        WITH visible AS (
            SELECT q.msg_id FROM pgmq_style.%1$I AS q
            WHERE q.vt <= clock_timestamp()
            ORDER BY q.msg_id
            LIMIT $1
            FOR UPDATE SKIP LOCKED)
        UPDATE pgmq_style.%1$I AS m
        SET vt = clock_timestamp() + $2, read_ct = m.read_ct + 1
        FROM visible
        WHERE m.msg_id = visible.msg_id
        RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
        $sql$, pgmq_style.table_of(queue_name))
    USING qty, make_interval(secs => vt);
END $$;

CREATE FUNCTION pgmq_style.delete(queue_name text, msg_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    -- pgmq 1.5's delete of a batch: the messages of the given ids, gone.
    RETURN QUERY EXECUTE format('DELETE FROM pgmq_style.%I WHERE msg_id = ANY ($1) RETURNING msg_id',
                                pgmq_style.table_of(queue_name))
    USING msg_ids;
END $$;
"""
PGMQ_READ = "SELECT * FROM pgmq_style.read(%s, %s, %s)"
PGMQ_DELETE = "SELECT * FROM pgmq_style.delete(%s, %s::bigint[])"
# pgmq's send_batch: the messages visible at once.
PGMQ_FILL = (f"INSERT INTO pgmq_style.q_{PGMQ_QUEUE} (vt, message) SELECT clock_timestamp(), "
             f"{sql_loops.PAYLOAD_SQL} FROM generate_series(%s::bigint, %s) AS i")
# Jobs of the queue still in the live table, by its indexes where it can.
JOBQ_LEFT = ("SELECT (SELECT count(*) FROM jobq._job WHERE queue = %(q)s AND NOT parked) "
             "+ (SELECT count(*) FROM jobq._job WHERE queue = %(q)s AND parked)")
TABLE_STATS = """
SELECT coalesce(s.autoanalyze_count, 0) + coalesce(s.analyze_count, 0), s.last_autoanalyze, now()
FROM pg_stat_user_tables AS s WHERE s.relid = %s::regclass
"""


# --- driver loops (run in their own processes) -------------------------------------------

class DrainClock:
    """A driver's own clock: when it sent its first claim, when its last
    acknowledgement that took jobs away returned (``time.monotonic``)."""

    def __init__(self, signals: Signals) -> None:
        self.signals = signals
        self.first: float | None = None
        self.last: float | None = None

    def claiming(self) -> None:
        if self.first is None:
            self.first = time.monotonic()

    def acknowledged(self, jobs: int) -> None:
        self.last = time.monotonic()
        self.signals.add(jobs)

    def report(self) -> None:
        self.signals.sample(("sql", self.first, self.last))


def floor_drain(task: Task, signals: Signals) -> None:
    """The floor: one DELETE … SKIP LOCKED takes and acknowledges a batch."""
    with sql_loops.connect(task.dsn) as conn:
        clock = DrainClock(signals)
        signals.ready()
        while not signals.stopped:
            clock.claiming()
            rows = conn.execute(sql_loops.FLOOR_DRAIN, (task.batch,)).fetchall()
            if rows:
                clock.acknowledged(len(rows))
            else:
                signals.stop.wait(IDLE_WAIT)
        clock.report()


def pgmq_drain(task: Task, signals: Signals) -> None:
    """The pgmq-style consumer: read a batch with a visibility timeout, delete it."""
    with sql_loops.connect(task.dsn) as conn:
        clock = DrainClock(signals)
        signals.ready()
        while not signals.stopped:
            clock.claiming()
            rows = conn.execute(PGMQ_READ, (PGMQ_QUEUE, PGMQ_VISIBILITY, task.batch)).fetchall()
            if rows:
                conn.execute(PGMQ_DELETE, (PGMQ_QUEUE, [r[0] for r in rows])).fetchall()
                clock.acknowledged(len(rows))
            else:
                signals.stop.wait(IDLE_WAIT)
        clock.report()


def jobq_drain(task: Task, signals: Signals) -> None:
    """jobq through SQL alone: claim a batch, complete_many it."""
    with sql_loops.connect(task.dsn) as conn:
        clock = DrainClock(signals)
        signals.ready()
        while not signals.stopped:
            clock.claiming()
            rows = conn.execute(sql_loops.JOBQ_CLAIM, (task.queue, task.batch, task.worker)).fetchall()
            if rows:
                conn.execute(sql_loops.JOBQ_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()
                clock.acknowledged(len(rows))
            else:
                signals.stop.wait(IDLE_WAIT)
        clock.report()


def worker_drain(task: Task, signals: Signals) -> None:
    """A pyqueue.Worker with a no-op handler that counts, and when the
    process began ``run()`` and its handler first and last ran."""
    lock = threading.Lock()
    handled: list[float] = []  # when the handler first ran, and last

    def handle(job: pyqueue.Job) -> None:
        now = time.monotonic()
        with lock:
            if not handled:
                handled.append(now)
            handled[1:] = [now]
        signals.add(1)

    worker = pyqueue.Worker(task.dsn, batch_size=task.batch, name=task.worker, **task.options)
    worker.register(task.queue, handle)

    def stop_when_told() -> None:
        signals.stop.wait()
        worker.stop()

    threading.Thread(target=stop_when_told, name="bench-stop", daemon=True).start()
    signals.ready()
    began = time.monotonic()
    worker.run(handle_signals=False)
    first, last = handled or (None, None)
    signals.sample(("worker", began, first, last))


# --- the systems ---------------------------------------------------------------------------

def floor_setup(conn: Conn) -> None:
    sql_loops.create_schema(conn)  # jobq_bench.floor_job (and the suite's other scratch tables, unused)


def floor_fill(conn: Conn, jobs: int) -> None:
    sql_loops.prefill_floor(conn, "floor_job", jobs)


def pgmq_setup(conn: Conn) -> None:
    conn.execute(PGMQ_DDL)


def pgmq_fill(conn: Conn, jobs: int) -> None:
    for start in range(0, jobs, sql_loops.PREFILL_CHUNK):
        conn.execute(PGMQ_FILL, (start + 1, min(jobs, start + sql_loops.PREFILL_CHUNK)))


def jobq_setup(conn: Conn) -> None:
    schema.install(conn)  # the install script, as `pyqueue install` runs it: no ANALYZE anywhere


def jobq_fill(conn: Conn, jobs: int) -> None:
    sql_loops.prefill_jobq(conn, QUEUE, jobs)  # enqueue_many, PREFILL_CHUNK jobs a call


@dataclass(frozen=True)
class System:
    """One system of the comparison: its label, the table its jobs live
    in, how a fresh database gets it and a burst of jobs, and its driver."""

    name: str
    label: str
    table: str
    setup: Callable[[Conn], None]
    fill: Callable[[Conn, int], None]
    loop: Loop


SYSTEMS = (  # in the order they run and print
    System("floor", "floor: DELETE … SKIP LOCKED LIMIT n", f"{sql_loops.BENCH_SCHEMA}.floor_job",
           floor_setup, floor_fill, floor_drain),
    System("pgmq", "pgmq-style: pgmq 1.5 read(vt) + delete(ids)", f"pgmq_style.q_{PGMQ_QUEUE}",
           pgmq_setup, pgmq_fill, pgmq_drain),
    System("jobq_sql", "jobq SQL: claim(q, n) + complete_many", "jobq._job",
           jobq_setup, jobq_fill, jobq_drain),
    System("pyqueue", "pyqueue.Worker, no-op handler", "jobq._job", jobq_setup, jobq_fill, worker_drain),
)
BY_NAME = {system.name: system for system in SYSTEMS}


# --- one drain -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Drain:
    """One drain of a burst: the jobs over the time from the earliest
    first claim to the latest acknowledgement; for pyqueue.Worker also its
    start-up (``run()`` to the first handler call) and the last handler
    call (from the first); and whether the table was analyzed before or
    during it."""

    outcome: Outcome
    startup_s: float | None = None
    handled_s: float | None = None
    analyzed_before: bool = False
    analyzed_after_s: float | None = None  # seconds into the drain of the last ANALYZE that ended in it

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {**self.outcome.as_dict(), "analyzed_before": self.analyzed_before,
                                 "analyzed_after_s": self.analyzed_after_s}
        if self.startup_s is not None:
            found["startup_s"] = round(self.startup_s, 4)
            found["handled_s"] = round(self.handled_s or 0.0, 4)
        return found


def analyses(conn: Conn, table: str) -> tuple[int, Any, Any]:
    """ANALYZE runs of ``table`` so far, its last autovacuum ANALYZE and the server's now()."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(TABLE_STATS, (table,)).fetchone()
    if row is None:
        raise BenchError(f"pg_stat_user_tables has no row for {table}")
    return int(row[0]), row[1], row[2]


def wait_until_empty(conn: Conn, deadline: float) -> float:
    """Block until no job of the queue is left in jobq._job; the moment seen."""
    while conn.execute(JOBQ_LEFT, {"q": QUEUE}).fetchone() != (0,):
        if time.monotonic() > deadline:
            raise BenchError(f"jobs of {QUEUE} were still not acknowledged at the deadline")
        time.sleep(ACK_POLL)
    return time.monotonic()


def clocks(run: Run, workers: int) -> list[tuple[Any, ...]]:
    """Every driver's clock, reported as it stopped."""
    found: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + SAMPLE_TIMEOUT
    while len(found) < workers:
        found += [cast("tuple[Any, ...]", sample) for sample in run.drain_samples()]
        if len(found) < workers:
            if time.monotonic() > deadline:
                raise BenchError(f"only {len(found)} of {workers} drivers reported their clocks")
            time.sleep(0.01)
    return found


def drain(dsn: str, conn: Conn, system: System, workers: int, jobs: int, *, batch: int, concurrency: int,
          timeout: float) -> Drain:
    """``workers`` processes of ``system``, started at once, take the
    ``jobs`` jobs waiting in the database of ``dsn`` (``conn``)."""
    options = {"concurrency": concurrency} if system.name == "pyqueue" else {}
    tasks = [Task(dsn, QUEUE, batch, f"{system.name}-{k + 1}", options=options) for k in range(workers)]
    before, _, server_start = analyses(conn, system.table)
    emptied: float | None = None
    with Run([Role(system.loop, tasks)], timeout=timeout) as run:
        run.until_count(jobs)
        if system.name == "pyqueue":
            emptied = wait_until_empty(conn, time.monotonic() + timeout)
    reported = clocks(run, workers)
    after, last_autoanalyze, _ = analyses(conn, system.table)
    analyzed_after = None
    if after > before and last_autoanalyze is not None:
        analyzed_after = max(0.0, (last_autoanalyze - server_start).total_seconds())
    if emptied is None:
        firsts = [c[1] for c in reported if c[1] is not None]
        lasts = [c[2] for c in reported if c[2] is not None]
        if not firsts or not lasts:
            raise BenchError(f"{system.name}: no driver claimed and acknowledged anything")
        outcome = Outcome(jobs, max(lasts) - min(firsts))
        return Drain(outcome, analyzed_before=before > 0, analyzed_after_s=analyzed_after)
    began = min(c[1] for c in reported)
    first_handled = [c[2] for c in reported if c[2] is not None]
    last_handled = [c[3] for c in reported if c[3] is not None]
    if not first_handled:
        raise BenchError("no pyqueue.Worker handled a job")
    first = min(first_handled)
    return Drain(Outcome(jobs, emptied - first), startup_s=first - began, handled_s=max(last_handled) - first,
                 analyzed_before=before > 0, analyzed_after_s=analyzed_after)
