"""Plans that do not depend on the statistics (issue 24, item 1), and costs
that do not grow with the backlog (item 5), proven by the plans the server
reports, never by timings.

Each regime is a database whose ``jobq._job`` holds 100,000 ready jobs and
whose statistics say something else: never analyzed (a new database, a
restore, a major-version upgrade), analyzed while empty, or analyzed at 10
jobs. Autovacuum is off for the table in each: its ANALYZE, due after the
fill, would otherwise replace the statistics the regime is about at a moment
of its choosing. Every hot-path call must then take its index path (the claim
reads the claim index in order: no sort, no bitmap scan, no sequential scan of
the backlog), and reap, the views and the metrics must read a bounded part of
the table, whatever the backlog.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from tests.conftest import install_jobq, proc_dsn
from tests.plan_support import Conn, Plan, describe, plans_of

# Its module-scoped fixture is built once: under pytest-xdist (--dist loadgroup)
# every test of this module runs on the same worker.
pytestmark = pytest.mark.xdist_group("plans")

BACKLOG = 100_000  # ready jobs in queue 'q' of every regime
BATCH = 100  # jobs per claim and acknowledgement
REGIMES = ("never analyzed", "analyzed empty", "analyzed at 10 jobs")
WALK_STEP = 1000  # jobq._leased_in_place reads the claim index 1,000 jobs at a time
EXACT_LIMIT = 10_000  # jobq._queue_counts counts up to this many index entries per queue

FILL = ("SELECT count(*) FROM jobq.enqueue_many('q', "
        "ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, %s) AS g))")

FAIR_BACKLOG, FAIR_KEYS = 20_000, 1_000  # ready jobs and their fair keys in the fair queue 'fq'
FAIR_FILL = ("SELECT count(*) FROM jobq.enqueue_many('fq', "
             "ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, %s) AS g), "
             "fair_keys => ARRAY(SELECT 'tenant-' || (g %% %s) FROM generate_series(1, %s) AS g))")


def prepare(conn: Conn, regime: str) -> None:
    """jobq._job with the regime's statistics, then the backlog."""
    # Autovacuum off for this table: an ANALYZE of its own would change the
    # statistics under test while the test runs.
    conn.execute("ALTER TABLE jobq._job SET (autovacuum_enabled = false)")
    if regime == "analyzed empty":
        conn.execute("ANALYZE jobq._job")
    elif regime == "analyzed at 10 jobs":
        conn.execute(FILL, (10,))
        conn.execute("ANALYZE jobq._job")
    conn.execute(FILL, (BACKLOG,))
    # A fair queue: FAIR_BACKLOG jobs over FAIR_KEYS keys (issue 28).
    conn.execute("SELECT jobq.configure_queue('fq', fair => true)")
    conn.execute(FAIR_FILL, (FAIR_BACKLOG, FAIR_KEYS, FAIR_BACKLOG))
    # One keyed job and a parent for the enqueue checks, in other queues.
    conn.execute("SELECT jobq.enqueue('keyed', '{}', job_key => 'k1')")
    conn.execute("SELECT jobq.enqueue('parents', '{}')")
    row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'jobq._job'::regclass").fetchone()
    assert row is not None
    expected = {"never analyzed": -1, "analyzed empty": 0, "analyzed at 10 jobs": 10}[regime]
    assert row[0] == expected, f"{regime}: the statistics say {row[0]} rows"


@pytest.fixture(scope="module", params=REGIMES)
def regime(request: pytest.FixtureRequest, postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """A database of its own per regime (filled once for all the tests of this module); its DSN."""
    name = "plans_" + str(request.param).replace(" ", "_")
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        install_jobq(postgresql_proc.host, postgresql_proc.port, postgresql_proc.user, name, None)
        dsn = proc_dsn(postgresql_proc, name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            prepare(conn, str(request.param))
        yield dsn
    finally:
        with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(regime: str) -> Iterator[Conn]:
    """A new session (no plan cached yet) to the regime's database."""
    with psycopg.connect(regime, autocommit=True) as conn:
        yield conn


CLAIMED = ("CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT * FROM jobq.claim('q', %s, 'plans')", (BATCH,))


def job_scans(plans: Sequence[Plan]) -> list[str]:
    return [str(n) for p in plans for n in p.scans_of("_job")]


def assert_never_over_the_backlog(plans: Sequence[Plan], most: int) -> None:
    """No sequential scan of jobq._job, and no scan of it or of one of its
    indexes (a bitmap's too) returning more than ``most`` rows in one
    execution, nor a sort of more than ``most`` of its rows."""
    assert plans, "auto_explain reported no plan"
    for plan in plans:
        for n in plan.nodes():
            on_job = n.relation == "_job" or (n.relation is None and str(n.index).startswith("_job_"))
            assert not (on_job and n.kind in ("Seq Scan", "Sample Scan")), describe(plans)
            assert not (on_job and "Scan" in n.kind and n.rows > most), describe(plans)
            sorted_rows = sum(s.rows for s in n.reads_without_limit() if s.relation == "_job")
            assert not (n.kind == "Sort" and sorted_rows > most), describe(plans)


def locking_statements(plans: Sequence[Plan]) -> list[Plan]:
    return [p for p in plans if "SKIP LOCKED" in p.query.upper() and "jobq._job" in p.query]


# --- item 1: the hot path -----------------------------------------------------------------

def test_claim_reads_the_claim_index_in_order(db: Conn) -> None:
    plans = plans_of(db, [("SELECT * FROM jobq.claim('q', %s, 'plans')", (BATCH,))])
    lock = locking_statements(plans)
    assert lock, describe(plans)
    scans = [n for p in lock for n in p.scans_of("_job")]
    assert any(n.kind == "Index Scan" and n.index == "_job_claim_idx" for n in scans), describe(lock)
    assert_never_over_the_backlog(plans, most=BATCH)


def test_a_claim_across_queues_reads_the_claim_index_in_order(db: Conn) -> None:
    plans = plans_of(db, [("SELECT * FROM jobq.claim(ARRAY['keyed', 'q'], %s, 'plans')", (BATCH,))])
    scans = [n for p in locking_statements(plans) for n in p.scans_of("_job")]
    assert any(n.index == "_job_claim_idx" for n in scans), describe(plans)
    assert_never_over_the_backlog(plans, most=BATCH)


def test_the_crowd_probe_reads_the_head_of_the_claim_index(db: Conn) -> None:
    plans = plans_of(db, [("SELECT * FROM jobq.claim('q', %s, 'plans')", (BATCH,))])
    probe = [p for p in plans if "AS head" in p.query]
    assert len(probe) == 1, describe(plans)
    scans = [str(n) for n in probe[0].scans_of("_job")]
    assert scans == ["Index Scan on _job_claim_idx (1 rows)"], describe(probe)


def test_a_fair_claim_reads_the_fair_index_key_by_key(db: Conn) -> None:
    # Issue 28: the keys by a skip scan that lands on each key's first job,
    # each key's jobs from the same index, or its first job locked where the
    # walk found it (a TID scan); never the backlog.
    plans = plans_of(db, [("SELECT * FROM jobq.claim('fq', %s, 'plans')", (BATCH,))])
    walk = [p for p in plans if "upper_keys" in p.query]
    assert walk, describe(plans)
    scans = [n for p in walk for n in p.scans_of("_job")]
    assert scans and all(n.kind == "Index Scan" and n.index == "_job_fair_idx" for n in scans), describe(walk)
    lock = locking_statements(plans)
    assert lock, describe(plans)
    scans = [n for p in lock for n in p.scans_of("_job")]
    assert scans and all((n.kind == "Index Scan" and n.index == "_job_fair_idx") or n.kind == "Tid Scan"
                         for n in scans), describe(lock)
    assert_never_over_the_backlog(lock, most=BATCH)
    # One index descent per key: with every key's first job ready, the walk's
    # probes are the only index scans; the jobs are locked where it found them.
    assert [str(n) for n in scans] == [f"Tid Scan on _job ({BATCH} rows)"], describe(lock)
    # Besides: where its leases may stay in place (jobq._fair_window, read
    # once per session and then every 500 jobs claimed): the first step of
    # the walk that finds leases in place, 1,000 jobs of the claim index.
    assert_never_over_the_backlog(plans, most=WALK_STEP)


def test_complete_many_finds_its_jobs_by_primary_key(db: Conn) -> None:
    complete = "SELECT jobq.complete_many(array_agg(id), array_agg(lease_token)) FROM claimed"
    plans = plans_of(db, [CLAIMED, (complete, ())])
    delete = [p for p in plans if "DELETE FROM jobq._job" in p.query]
    assert delete, describe(plans)
    assert [n.index for p in delete for n in p.scans_of("_job")] == ["_job_pkey"], describe(delete)
    assert_never_over_the_backlog(plans, most=BATCH)


LEASE_CALLS = {
    "complete": "SELECT jobq.complete(id, lease_token) FROM claimed LIMIT 1",
    "fail": "SELECT jobq.fail(id, 'boom', lease_token) FROM claimed LIMIT 1",
    "heartbeat": "SELECT jobq.heartbeat(id, lease_token) FROM claimed LIMIT 1",
    "release": "SELECT jobq.release(id, lease_token) FROM claimed LIMIT 1",
}


@pytest.mark.parametrize("call", sorted(LEASE_CALLS))
def test_an_acknowledgement_finds_its_job_by_primary_key(db: Conn, call: str) -> None:
    plans = plans_of(db, [CLAIMED, (LEASE_CALLS[call], ())])
    scans = [n for p in plans for n in p.scans_of("_job")]
    assert scans and all(n.index == "_job_pkey" for n in scans), describe(plans)
    assert_never_over_the_backlog(plans, most=1)


OTHER_PATHS: dict[str, list[tuple[str, Sequence[object]]]] = {
    # take and hold: jobq._lock_ready, one index scan.
    "take": [("SELECT * FROM jobq.take('q', %s)", (BATCH,))],
    "hold": [("SELECT * FROM jobq.hold('q', %s)", (BATCH,))],
    # A limited queue: the full path, jobq._pick.
    "claim, limited queue": [("SELECT jobq.configure_queue('q', concurrency => 500)", ()),
                             ("SELECT * FROM jobq.claim('q', %s, 'plans')", (BATCH,))],
    # enqueue's unique check (the key held by an active job) and its parents' checks.
    "enqueue, held key": [("SELECT jobq.enqueue('keyed', '{}', job_key => 'k1')", ())],
    "enqueue, parents": [("SELECT set_config('plans.parent', min(id)::text, true) FROM jobq._job "
                          "WHERE queue = 'parents'", ()),
                         ("SELECT jobq.enqueue('children', '{}', "
                          "depends_on => ARRAY[current_setting('plans.parent')::bigint])", ())],
}


@pytest.mark.parametrize("path", sorted(OTHER_PATHS))
def test_the_other_hot_paths_read_by_index(db: Conn, path: str) -> None:
    plans = plans_of(db, OTHER_PATHS[path])
    assert job_scans(plans), describe(plans)
    # A bitmap of the primary key counts the dead versions the rolled-back
    # claims of the other tests left, too: a bound of 10 batches, not one.
    assert_never_over_the_backlog(plans, most=10 * BATCH)


# --- item 5: what must not grow with the backlog --------------------------------------------

def test_reap_with_nothing_expired_reads_no_backlog(db: Conn) -> None:
    """The walk reads one step of the claim index (its head), the parked
    leases come from their expiry index, and nothing else of jobq._job."""
    plans = plans_of(db, [CLAIMED, ("SELECT jobq.reap()", ())])
    assert_never_over_the_backlog(plans, most=WALK_STEP)
    indexes = {n.index for p in plans for n in p.scans_of("_job")}
    assert {"_job_claim_idx", "_job_parked_expiry_idx"} <= indexes, describe(plans)


def test_reap_after_a_fair_claim_reads_no_backlog(db: Conn) -> None:
    """A fair claim leases in place only where reap's walk of the claim
    index finds the leases (issue 28): reap reads the same as after a plain
    claim, never the fair index key by key."""
    claimed_fair = ("CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT * FROM jobq.claim('fq', %s, 'plans')",
                    (BATCH,))
    plans = plans_of(db, [claimed_fair, ("SELECT jobq.reap()", ())])
    assert_never_over_the_backlog(plans, most=WALK_STEP)
    indexes = {n.index for p in plans for n in p.scans_of("_job")}
    assert {"_job_claim_idx", "_job_parked_expiry_idx"} <= indexes, describe(plans)
    assert "_job_fair_idx" not in indexes, describe(plans)


VIEWS = {
    "stats": "SELECT * FROM jobq.stats",
    "queues": "SELECT * FROM jobq.queues",
    "workers": "SELECT * FROM jobq.workers",
    "metrics": "SELECT * FROM jobq.metrics()",
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_the_views_read_a_bounded_part_of_the_backlog(db: Conn, view: str) -> None:
    plans = plans_of(db, [CLAIMED, (VIEWS[view], ())])
    # At most: the exact count of a queue's index entries, one step of the
    # walk, and the sample of the table (TID ranges of a few pages).
    assert_never_over_the_backlog(plans, most=EXACT_LIMIT + 1)
    total = sum(n.rows * n.loops for p in plans for n in p.scans_of("_job"))
    assert total < BACKLOG / 3, describe(plans)


def test_stats_counts_the_backlog_as_an_estimate_and_the_running_jobs_exactly(db: Conn) -> None:
    with db.transaction(force_rollback=True):
        db.execute(*CLAIMED)
        row = db.execute("SELECT ready, running, scheduled, waiting, estimated, "
                         "oldest_ready_age > interval '0' FROM jobq.stats WHERE queue = 'q'").fetchone()
        truth = db.execute("SELECT count(*) FROM jobq._job WHERE queue = 'q' AND status = 'ready'").fetchone()
    assert row is not None and truth is not None
    ready, running, scheduled, waiting, estimated, aged = row
    assert (running, scheduled, waiting, estimated, aged) == (BATCH, 0, 0, True, True)
    assert abs(ready - truth[0]) < truth[0] * 0.1, (ready, truth)


# --- plans cached while the queue was small -------------------------------------------------

# Each call on its own job of a claim of 10 (``held``: id and lease token by position).
SMALL_CALLS: dict[str, str] = {
    "complete_many": ("SELECT jobq.complete_many(ARRAY[%(id0)s, %(id1)s]::bigint[], "
                      "ARRAY[%(t0)s, %(t1)s]::uuid[])"),
    "complete": "SELECT jobq.complete(%(id2)s, %(t2)s::uuid)",
    "fail": "SELECT jobq.fail(%(id3)s, 'boom', %(t3)s::uuid)",
    "heartbeat": "SELECT jobq.heartbeat(%(id4)s, %(t4)s::uuid)",
    "release": "SELECT jobq.release(%(id5)s, %(t5)s::uuid)",
    "enqueue with parents": "SELECT jobq.enqueue('children', '{}', depends_on => ARRAY[%(id6)s]::bigint[])",
}
LIVE_TABLES = ("_job", "_job_error", "_job_wait", "_job_dep")


def held(conn: Conn) -> dict[str, object]:
    rows = conn.execute("SELECT id, lease_token FROM jobq.claim('q', 10, 'plans') ORDER BY id").fetchall()
    assert len(rows) == 10
    return {**{f"id{k}": r[0] for k, r in enumerate(rows)}, **{f"t{k}": r[1] for k, r in enumerate(rows)}}


def test_plans_cached_while_the_queue_was_small_hold_when_a_backlog_arrives(conn: Conn) -> None:
    """A worker's session plans its statements once (generic plans) and keeps
    them: one that started on a queue of a few jobs must not keep a plan made
    for a table of one page (a sequential scan of it) when 100,000 jobs
    arrive and nothing has analyzed or vacuumed the table yet."""
    conn.execute("ALTER TABLE jobq._job SET (autovacuum_enabled = false)")
    conn.execute(FILL, (10,))
    jobs = held(conn)
    for statement in SMALL_CALLS.values():  # every call once, for real, while the table is small
        conn.execute(statement, jobs)
    conn.execute("SELECT jobq.reap()")
    conn.execute(FILL, (BACKLOG,))
    jobs = held(conn)
    for name, statement in SMALL_CALLS.items():
        plans = plans_of(conn, [(statement, jobs)])
        for plan in plans:
            for n in plan.nodes():
                assert not (n.relation in LIVE_TABLES and n.kind in ("Seq Scan", "Sample Scan")), \
                    f"{name}:\n{describe(plans)}"
        assert_never_over_the_backlog(plans, most=10 * BATCH)
