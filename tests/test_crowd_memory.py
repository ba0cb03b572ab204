"""The plain claim's memory of a calm crowd probe (jobq 0.13.0, issue 24).

A claim of a plain queue probes the head of the claim index for old
in-place leases (jobq._crowded_queues) and parks its own leases when it
finds them. The probe walks the dead index entries of completed jobs, so a
calm verdict is remembered in the session (``jobq.calm_queues``) and holds
for the session's next claims of the same queues, in later transactions,
for 50 ms. These tests set the remembered verdict by hand (its time from
the server's clock), so that nothing depends on how fast the machine runs;
pgtap/crowded_queues.sql checks the probe itself inside one transaction.
"""

from __future__ import annotations

import psycopg

Conn = psycopg.Connection[tuple[object, ...]]
REMEMBER = ("SELECT set_config('jobq.calm_queues', concat_ws('|', "
            "extract(epoch FROM clock_timestamp()) + %s::numeric, 'earlier', %s::text), false)")
# A verdict remembered and the claim of 3 that reads it, in one message: the server runs them back to
# back, well within the verdict's 50 ms however slow the machine (two round trips need not be).
REMEMBER_THEN_CLAIM = (
    "SELECT set_config('jobq.calm_queues', concat_ws('|', extract(epoch FROM clock_timestamp()), 'earlier', "
    "'crowd'), false); SELECT id FROM jobq.claim('crowd', 3, 'w')")


def claim_parked(worker: Conn, n: int) -> list[bool]:
    """Claim n jobs of 'crowd'; whether each lease was parked."""
    ids = [r[0] for r in worker.execute("SELECT id FROM jobq.claim('crowd', %s, 'w')", (n,)).fetchall()]
    assert len(ids) == n
    return parked(worker, ids)


def parked(worker: Conn, ids: list[object]) -> list[bool]:
    """Whether each of these jobs' leases was parked, in id order."""
    return [bool(r[0]) for r in worker.execute(
        "SELECT parked FROM jobq._job WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()]


def crowd_the_head(conn: Conn, worker: Conn) -> None:
    """Jobs in 'crowd', the first five leased in place by ``worker``, then
    made a second old: the head of the claim index is a crowd of leases."""
    conn.execute("SELECT jobq.enqueue_many('crowd', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 40)))")
    assert claim_parked(worker, 5) == [False] * 5
    conn.execute("UPDATE jobq._job SET started_at = started_at - interval '1 second' "
                 "WHERE status = 'running'")


def setting(worker: Conn) -> str:
    row = worker.execute("SELECT current_setting('jobq.calm_queues', true)").fetchone()
    assert row is not None
    return str(row[0])


def test_a_calm_verdict_of_the_probe_is_remembered_for_the_next_claims(conn: Conn, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as worker:
        conn.execute("SELECT jobq.enqueue('crowd', '{}')")
        assert claim_parked(worker, 1) == [False]
        assert setting(worker).endswith("|crowd"), "the calm verdict of the first claim's probe is remembered"


def test_a_fresh_calm_verdict_holds_even_over_a_crowd(conn: Conn, dsn: str) -> None:
    # Fails on 0.12.0, which probed at every claim: these leases were parked.
    with psycopg.connect(dsn, autocommit=True) as worker:
        crowd_the_head(conn, worker)
        cursor = worker.execute(REMEMBER_THEN_CLAIM)
        assert cursor.nextset()
        ids = [r[0] for r in cursor.fetchall()]
        assert parked(worker, ids) == [False] * 3, "a calm verdict under 50 ms old: no probe, in place"


def test_an_old_or_foreign_verdict_does_not_hold_and_a_crowded_one_is_not_kept(conn: Conn, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as worker:
        crowd_the_head(conn, worker)
        for offset, queues, what in [(-0.06, "crowd", "60 ms old"), (10, "crowd", "from the future (forged)"),
                                     (0, "other", "of other queues"), (0, "crowd other", "of more queues")]:
            worker.execute(REMEMBER, (offset, queues))
            assert claim_parked(worker, 2) == [True, True], f"a verdict {what}: the probe finds the crowd"
            assert setting(worker) == "", "a crowded verdict is not remembered"


def test_a_claim_of_one_queue_in_an_array_not_starting_at_one(conn: Conn) -> None:
    # The one-queue path of jobq._plain_leases reads the array's first element by its own subscript.
    conn.execute("SELECT jobq.enqueue_many('q', ARRAY['{}', '{}', '{}']::jsonb[])")
    rows = conn.execute("SELECT id FROM jobq.claim('[3:3]={q}'::text[], 2, 'w')").fetchall()
    assert len(rows) == 2
