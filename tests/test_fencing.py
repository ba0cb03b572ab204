"""Fencing races at the SQL level, with several real sessions:

* a late complete / fail / heartbeat / progress / release / snooze from a worker whose
  lease expired after the job was reaped (or reaped and claimed again)
  changes nothing, row for row;
* a reaper racing acknowledgements never resurrects a finished job and never
  loses one: every job ends exactly one way;
* two reapers at once never wait on each other, let alone deadlock.

Leases really expire (1 s, the shortest jobq allows): nothing here edits the
tables behind jobq's back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.chaos_support import elapsed, report, rng, scaled, snapshot
from tests.worker_support import scalar

Conn = psycopg.Connection[Any]

LEASE = "1 second"  # the shortest lease jobq grants
EXPIRY_WAIT = 1.2  # seconds: past the lease, on the database clock
RACE_ROUNDS = 3  # rounds per race test (times the chaos scale)
RACE_JOBS = 100  # jobs whose leases expire together in a round
STATEMENT_TIMEOUT = "20s"  # a hang shows as an error instead of a stuck test
EXPIRED_LEFT = ("SELECT count(*) FROM jobq._job WHERE queue = %s "
                "AND status = 'running' AND lease_expires_at < now()")


@pytest.fixture
def sessions(dsn: str) -> Iterator[Callable[[], Conn]]:
    """Extra autocommit sessions to the test's database, closed at the end."""
    opened: list[Conn] = []

    def open_session() -> Conn:
        session = psycopg.connect(dsn, autocommit=True)
        session.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
        opened.append(session)
        return session

    yield open_session
    for session in opened:
        session.close()


def claim_all(conn: Conn, queue: str, n: int, worker: str, lease: str = LEASE) -> list[tuple[int, UUID]]:
    rows = conn.execute("SELECT id, lease_token FROM jobq.claim(%s, %s, %s, %s::interval) ORDER BY id",
                        (queue, n, worker, lease)).fetchall()
    return [(int(r[0]), r[1]) for r in rows]


def wait_for_expiry(conn: Conn, ids: list[int]) -> None:
    """Sleep until every lease of ``ids`` has expired on the database clock."""
    time.sleep(EXPIRY_WAIT)
    while scalar(conn, "SELECT count(*) FROM jobq._job WHERE id = ANY(%s) AND lease_expires_at >= now()",
                 (ids,)):
        time.sleep(0.1)


def row(conn: Conn, job_id: int) -> Any:
    return scalar(conn, "SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = %s", (job_id,))


LATE_CALLS: dict[str, str] = {
    "complete": "SELECT jobq.complete(%(id)s, %(token)s)",
    "fail": "SELECT jobq.fail(%(id)s, 'late failure', %(token)s)",
    "fail with retry_at": "SELECT jobq.fail(%(id)s, 'late failure', %(token)s, now() + interval '1 hour')",
    "heartbeat": "SELECT jobq.heartbeat(%(id)s, %(token)s)",
    "heartbeat with extend": "SELECT jobq.heartbeat(%(id)s, %(token)s, interval '1 hour')",
    "progress": "SELECT jobq.progress(%(id)s, %(token)s, '{\"late\": true}')",
    "release": "SELECT jobq.release(%(id)s, %(token)s)",
    "snooze": "SELECT jobq.snooze(%(id)s, %(token)s, now() + interval '1 hour')",
    "complete_many": "SELECT jobq.complete_many(ARRAY[%(id)s]::bigint[], ARRAY[%(token)s]::uuid[]) = 1",
}


@pytest.mark.parametrize("after", ["reaped", "reaped and claimed again", "cancelled"])
def test_late_calls_of_an_expired_holder_change_nothing(
    conn: Conn, sessions: Callable[[], Conn], tmp_path: Path, after: str
) -> None:
    old, new = sessions(), sessions()
    # History is opt-in (jobq 0.3.0): keep it to see the job completed.
    conn.execute("SELECT jobq.configure_queue('fence', retention => interval '1 day')")
    job_id = scalar(conn, "SELECT jobq.enqueue('fence', %s)", (Jsonb({"n": 1}),))
    [(_, old_token)] = claim_all(old, "fence", 1, "old-holder")
    wait_for_expiry(conn, [job_id])
    new_token: UUID | None = None
    if after == "cancelled":
        assert scalar(conn, "SELECT jobq.cancel(%s)", (job_id,)) is True
    else:
        assert scalar(conn, "SELECT jobq.reap()") == 1
        if after == "reaped and claimed again":
            [(claimed, new_token)] = claim_all(new, "fence", 1, "new-holder", "5 minutes")
            assert claimed == job_id and new_token != old_token

    before = snapshot(conn)
    for name, sql in LATE_CALLS.items():
        result = scalar(old, sql, {"id": job_id, "token": old_token})
        assert result is False, f"late {name} of the old holder returned {result}"
        assert snapshot(conn) == before, f"late {name} of the old holder changed jobq's tables"

    if new_token is not None:
        # The new holder's lease is intact: it completes the job.
        assert row(conn, job_id)["worker"] == "new-holder"
        assert scalar(new, "SELECT jobq.complete(%s, %s)", (job_id, new_token)) is True
        assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "completed"
    report(f"late calls after the job was {after}", {"late_calls": len(LATE_CALLS), "changes": 0}, tmp_path)


def test_an_expired_but_unreaped_lease_still_completes(conn: Conn, sessions: Callable[[], Conn]) -> None:
    """The fence is the lease token, not the clock: until someone reaps or
    cancels the job, its holder (late but alone) may still finish it."""
    holder = sessions()
    conn.execute("SELECT jobq.configure_queue('fence', retention => interval '1 day')")  # history is opt-in
    job_id = scalar(conn, "SELECT jobq.enqueue('fence', '{}')")
    [(_, token)] = claim_all(holder, "fence", 1, "slow-holder")
    wait_for_expiry(conn, [job_id])
    assert scalar(holder, "SELECT jobq.heartbeat(%s, %s)", (job_id, token)) is True
    assert scalar(holder, "SELECT jobq.complete(%s, %s)", (job_id, token)) is True
    assert scalar(conn, "SELECT jobq.reap()") == 0
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "completed"


class Race:
    """Two callables started together on their own sessions; errors kept."""

    def __init__(self, *targets: Callable[[], None]) -> None:
        self.barrier = threading.Barrier(len(targets))
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in targets]

    def _run(self, target: Callable[[], None]) -> None:
        try:
            self.barrier.wait(30)
            target()
        except BaseException as error:
            self.errors.append(error)

    def run(self) -> None:
        for thread in self.threads:
            thread.start()
        for thread in self.threads:
            thread.join(120)
            assert not thread.is_alive(), "a racer hung"
        assert self.errors == [], self.errors


ACKS: dict[str, str] = {
    "complete": "SELECT jobq.complete(%s, %s)",
    "fail": "SELECT jobq.fail(%s, 'handler failed', %s)",
    "heartbeat": "SELECT jobq.heartbeat(%s, %s)",
}


@pytest.mark.parametrize("ack", sorted(ACKS))
def test_a_reaper_racing_acknowledgements_never_resurrects_or_loses_a_job(
    conn: Conn, sessions: Callable[[], Conn], tmp_path: Path, ack: str
) -> None:
    rand, seed = rng(f"reaper-vs-{ack}")
    worker, reaper, watcher = sessions(), sessions(), sessions()
    rounds = scaled(RACE_ROUNDS)
    acked = reaped = 0
    started = time.monotonic()
    for round_no in range(rounds):
        queue = f"race{round_no}"
        # History is opt-in (jobq 0.3.0): keep it, so every job is either live or archived.
        conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (queue,))
        ids = [int(r[0]) for r in conn.execute(
            "SELECT jobq.enqueue_many(%s, array_agg(jsonb_build_object('i', i))) "
            "FROM generate_series(1, %s) AS i", (queue, RACE_JOBS)).fetchall()]
        leases = claim_all(worker, queue, RACE_JOBS, "racer")
        assert sorted(i for i, _ in leases) == sorted(ids)
        wait_for_expiry(watcher, ids)
        rand.shuffle(leases)
        results: dict[int, bool] = {}
        reaped_now: list[int] = []

        def acknowledge(leases: list[tuple[int, UUID]] = leases, results: dict[int, bool] = results) -> None:
            for job_id, token in leases:
                results[job_id] = bool(scalar(worker, ACKS[ack], (job_id, token)))

        def reap(queue: str = queue, reaped_now: list[int] = reaped_now) -> None:
            # One job per call, so that the two sessions interleave job by job.
            while True:
                n = int(scalar(reaper, "SELECT jobq.reap(1)"))
                reaped_now.append(n)
                if n == 0 and scalar(reaper, EXPIRED_LEFT, (queue,)) == 0:
                    return

        Race(acknowledge, reap).run()
        live = {int(r[0]): r[1:] for r in conn.execute(
            "SELECT id, status, last_error, lease_expires_at > now() FROM jobq._job WHERE queue = %s",
            (queue,)).fetchall()}
        archived = {int(r[0]): r[1] for r in conn.execute(
            "SELECT id, status FROM jobq._job_archive WHERE queue = %s", (queue,)).fetchall()}
        assert set(live) & set(archived) == set(), "a job is both live and finished"
        assert set(live) | set(archived) == set(ids), "a job disappeared"
        won = [j for j in ids if results[j]]
        lost = [j for j in ids if not results[j]]
        # Exactly one side won each job, and the reaper's count says which.
        assert sum(reaped_now) == len(lost)
        for job_id in lost:  # the reaper came first: back in the queue, noted as reaped
            status, last_error, _ = live[job_id]
            assert status == "ready" and str(last_error).startswith("lease expired"), (job_id, live[job_id])
        for job_id in won:
            if ack == "complete":
                assert archived.get(job_id) == "completed", job_id
            elif ack == "fail":
                status, last_error, _ = live[job_id]
                assert status == "ready" and last_error == "handler failed", (job_id, live[job_id])
            else:  # heartbeat: still running, under a lease that runs again
                status, _, leased = live[job_id]
                assert status == "running" and leased, (job_id, live[job_id])
        acked += len(won)
        reaped += len(lost)
    report(f"reaper racing {ack}", {
        "rounds": rounds, "jobs": rounds * RACE_JOBS, "won_by_the_acknowledgement": acked,
        "won_by_the_reaper": reaped, "resurrected": 0, "lost": 0,
        "seconds": elapsed(started), "seed": seed,
    }, tmp_path)
    assert acked + reaped == rounds * RACE_JOBS
    assert acked > 0 and reaped > 0, "both sides won some jobs: the two sessions really raced"


def reap_until_done(session: Conn, queue: str, n: int, out: list[tuple[int, float]]) -> None:
    """reap(n) until the queue has no running job left; (count, seconds) of each call.

    A wait on the other reaper would exceed lock_timeout (jobq pins 5 s for
    reap) and raise 55P03; a deadlock would raise 40P01. Either fails the race.
    """
    session.execute("SET lock_timeout = '1s'")
    while True:
        t0 = time.monotonic()
        got = int(scalar(session, "SELECT jobq.reap(%s)", (n,)))
        out.append((got, time.monotonic() - t0))
        if got == 0 and scalar(session, "SELECT count(*) FROM jobq._job WHERE queue = %s "
                                        "AND status = 'running'", (queue,)) == 0:
            return


def test_two_reapers_at_once_never_wait_on_each_other(
    conn: Conn, sessions: Callable[[], Conn], tmp_path: Path
) -> None:
    first, second, worker = sessions(), sessions(), sessions()
    rounds = scaled(RACE_ROUNDS)
    jobs = 3 * RACE_JOBS
    calls = 0
    slowest = 0.0
    started = time.monotonic()
    for round_no in range(rounds):
        queue = f"reap{round_no}"
        # Half the jobs have no attempt left: reaping dead-letters them
        # (archive path), the other half go back to the queue.
        conn.execute("SELECT jobq.enqueue_many(%s, array_agg(jsonb_build_object('i', i)), max_attempts => 1) "
                     "FROM generate_series(1, %s) AS i", (queue, jobs // 2))
        conn.execute("SELECT jobq.enqueue_many(%s, array_agg(jsonb_build_object('i', i))) "
                     "FROM generate_series(1, %s) AS i", (queue, jobs - jobs // 2))
        leases = claim_all(worker, queue, jobs, "doomed")
        wait_for_expiry(conn, [i for i, _ in leases])
        counts: list[list[tuple[int, float]]] = [[], []]
        Race(partial(reap_until_done, first, queue, 7, counts[0]),
             partial(reap_until_done, second, queue, 5, counts[1])).run()
        reaped = sum(n for out in counts for n, _ in out)
        calls += sum(len(out) for out in counts)
        slowest = max([slowest, *(t for out in counts for _, t in out)])
        assert reaped == jobs, "every expired job was reaped exactly once"
        states = dict(conn.execute(
            "SELECT status, count(*) FROM jobq.jobs WHERE queue = %s GROUP BY status", (queue,)).fetchall())
        assert states == {"ready": jobs - jobs // 2, "dead": jobs // 2}
    report("two reapers at once", {
        "rounds": rounds, "jobs": rounds * jobs, "reap_calls": calls, "errors": 0, "deadlocks": 0,
        "slowest_call_seconds": round(slowest, 3), "seconds": elapsed(started),
    }, tmp_path)
