"""Workflows cost in proportion to the graph (issue 25, item 3).

jobq 0.8.0 cancelled a failed job's descendants level by level with plans
cached while the graph was small (or never analyzed): every level scanned
the whole dependency table, so ``fail()`` of the root of a chain 3,000 deep
took 15 s inside one worker's acknowledgement, and building the chain in one
transaction was quadratic too. Since 0.9.0 the cascade is one recursive pass
and the workflow functions plan at each call.

Measured here by rows, not by time: the rows the server read from jobq's
tables (``pg_stat_xact_user_tables``: sequential reads plus heap fetches
through indexes) to build a chain in one transaction and to cascade its
root's death, per job, at two depths, each in a freshly installed (never
analyzed) jobq. Linear work reads the same per job at both; quadratic work
reads four times as much per job at the deeper one.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.chaos_support import install_script
from tests.worker_support import scalar

Conn = psycopg.Connection[Any]

QUEUE = "chain"
SHALLOW, DEEP = 200, 800
READS = ("SELECT sum(seq_tup_read + coalesce(idx_tup_fetch, 0)) FROM pg_stat_xact_user_tables "
         "WHERE schemaname = 'jobq'")
LINEAR = 1.5  # per-job reads at DEEP over those at SHALLOW: linear stays near 1, quadratic is 4


def build_and_fail(conn: Conn, depth: int) -> tuple[float, float]:
    """Rows read per job to build a chain of ``depth`` (one transaction,
    commit-time work included) and to fail its root (the cascade), in a
    jobq installed afresh."""
    conn.execute("SET client_min_messages = warning")
    conn.execute("DROP SCHEMA jobq CASCADE")
    conn.execute(install_script().encode())
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (QUEUE,))
    with conn.transaction():
        root = previous = int(scalar(conn, "SELECT jobq.enqueue(%s, '{}', max_attempts => 1)", (QUEUE,)))
        for _ in range(depth):
            previous = int(scalar(conn, "SELECT jobq.enqueue(%s, '{}', depends_on => %s::bigint[])",
                                  (QUEUE, [previous])))
        # the commit's work, run now to be counted here
        conn.execute("SET CONSTRAINTS jobq._500_settle_at_commit IMMEDIATE")
        built = int(scalar(conn, READS))
    claimed = conn.execute("SELECT id, lease_token FROM jobq.claim(%s, 1)", (QUEUE,)).fetchone()
    job_id, token = claimed or (0, 0)
    assert job_id == root
    with conn.transaction():
        assert scalar(conn, "SELECT jobq.fail(%s, 'fatal', %s)", (job_id, token)) is True
        failed = int(scalar(conn, READS))
    cancelled = scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = %s AND status = 'cancelled' "
                             "AND cancelled_by = %s", (QUEUE, root))
    assert cancelled == depth, "the whole chain is cancelled by its root"
    return built / depth, failed / depth


def test_a_chain_costs_the_same_per_job_at_any_depth(conn: Conn) -> None:
    shallow = build_and_fail(conn, SHALLOW)
    deep = build_and_fail(conn, DEEP)
    print(f"\nrows read per job: build {shallow[0]:.1f} at {SHALLOW}, {deep[0]:.1f} at {DEEP}; "
          f"cascade {shallow[1]:.1f} at {SHALLOW}, {deep[1]:.1f} at {DEEP}")
    assert deep[0] <= LINEAR * shallow[0], f"building reads more per job at depth: {shallow} {deep}"
    assert deep[1] <= LINEAR * shallow[1], f"the cascade reads more per job at depth: {shallow} {deep}"
