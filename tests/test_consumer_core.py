"""The worker's decision core, without a database (issue 30, item 2).

Everything a worker decides is written once, free of I/O, as scripts that
yield the statements they need (``pyqueue.worker.scripts``). Here a fake
driver runs those scripts and answers each ``Sql`` from a table (a value, an
exception to throw in, or a function of the statement), the way psycopg
tests its generators: the ordered put-back of acks that could not be sent,
lost / transient / fatal errors, FOLLOWER_DELAY, ``Rounds``, the heartbeat
retry, the backoffs, maintenance, and a job's state machine with the
handler, its timeout and the heartbeat racing. What needs a server (SKIP
LOCKED, fencing, LISTEN) stays in the real-server tests.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from functools import partial
from typing import Any

import psycopg
import psycopg.errors
import pytest

from pyqueue import _queries as q
from pyqueue._db import Claimed
from pyqueue.defaults import FOLLOWER_DELAY, RECONNECT_DELAY_MIN
from pyqueue.job import ACKNOWLEDGED, TRANSITIONS, Event, Job, JobRecord, JobState
from pyqueue.worker.acknowledgement import ACK_CHUNK, TOO_LARGE, Acks
from pyqueue.worker.consumer import ConsumerCore
from pyqueue.worker.heartbeats import HEARTBEAT_RETRY_DELAY, HeartbeatBook, beating
from pyqueue.worker.maintenance import PRUNE, Every, PruneTimer, pruning, reaping
from pyqueue.worker.polling import Backoff, PollBackoff
from pyqueue.worker.scripts import Listen, Op, Pipelined, Reset, Script, Sleep, Sql, Step, T
from pyqueue.worker.settings import WorkerSettings
from pyqueue.worker.timeouts import RunningJobs
from pyqueue.worker.worker_core import Rounds

NOW = datetime.now(timezone.utc)
LOST = psycopg.OperationalError("server closed the connection unexpectedly")  # no SQLSTATE: gone
Answer = Any  # a value, an exception (thrown into the script), or a function of the Sql


class FakeDriver:
    """Runs a consumer script as ``sync_consumer`` does, answering each ``Sql``
    from ``table`` (query -> answer, or a list of answers, one per call) and
    recording every operation. A statement not in the table fails the test."""

    def __init__(self, table: dict[str, Answer] | None = None, *, listen: Answer = True) -> None:
        self.table = dict(table or {})
        self.listen = listen
        self.ops: list[Op] = []

    def run(self, script: Script[T]) -> T:
        step = Step(script)
        while step.next():
            self.ops.append(step.op)
            try:
                step.result = self._answer(step.op)
            except Exception as error:
                step.error = error
        return step.value

    def _answer(self, op: Op) -> Any:
        if isinstance(op, Listen):
            return self._give(self.listen, op)
        if isinstance(op, Pipelined):  # one transaction: the first error undoes them all
            return [self._answer(step) for step in op.steps]
        if not isinstance(op, Sql):
            return None  # Reset, Sleep: nothing to answer
        assert op.query in self.table, f"unexpected statement: {op.query}"
        answer = self.table[op.query]
        if isinstance(answer, list):
            assert answer, f"no answer left for: {op.query}"
            answer = answer.pop(0)
        return self._give(answer, op)

    @staticmethod
    def _give(answer: Answer, op: Op) -> Any:
        if isinstance(answer, BaseException):
            raise answer
        return answer(op) if callable(answer) else answer

    def statements(self) -> list[str]:
        """The statements sent, in order (a pipeline's one after the other)."""
        return [step.query for op in self.ops for step in (op.steps if isinstance(op, Pipelined) else [op])
                if isinstance(step, Sql)]

    def of(self, kind: type[Op]) -> list[Op]:
        return [op for op in self.ops if isinstance(op, kind)]


def record(job_id: int, lease: float = 30.0, state: JobState = JobState.RUNNING,
           kind: type[JobRecord] = JobRecord) -> Any:
    job = kind(id=job_id, queue="q", payload={}, priority=0, attempts=1, max_attempts=3, run_at=NOW,
               created_at=NOW, lease_token=uuid.uuid4(), lease_expires_at=NOW, worker="w", job_key=None,
               last_error=None)
    job._lease_seconds = lease
    job._state = state
    return job


def ids_of(op: Op) -> list[int]:
    """The job ids an ack statement carries (its first parameter, an array literal)."""
    assert isinstance(op, Sql)
    return [int(i) for i in op.params[0].strip("{}").split(",")]


def nothing() -> None:
    pass


# --- the acks: queued once, sent in chunks, put back in order -------------------------------

def test_acks_not_sent_go_back_in_front_of_later_ones_in_order() -> None:
    book = HeartbeatBook()
    acks = Acks(book, nothing)
    jobs = [record(i) for i in range(1, 2501)]
    book.add(jobs, time.monotonic())
    completes, fails, releases = jobs[:2400], jobs[2400:2450], jobs[2450:]
    for job in completes:
        assert acks.complete_later(job)
    for job in fails:
        assert acks.fail_later(job, f"boom {job.id}")
    for job in releases:
        assert acks.release_later(job)
    late = record(9999)

    def second_chunk_lost(op: Op) -> Any:
        assert acks.complete_later(late)  # a handler finishes while the statement is on its way
        raise LOST

    driver = FakeDriver({q.COMPLETE_MANY: [ACK_CHUNK, second_chunk_lost]})
    assert driver.run(acks.sending()) is False
    assert driver.statements() == [q.COMPLETE_MANY, q.COMPLETE_MANY]
    assert ids_of(driver.ops[0]) == [j.id for j in completes[:ACK_CHUNK]]
    assert driver.ops[-1] == Reset("work")  # a lost connection is dropped
    assert all(j._state is JobState.ACKED for j in completes[:ACK_CHUNK])
    assert all(j._state is JobState.ACK_QUEUED for j in jobs[ACK_CHUNK:])
    assert {j.id for j in book.jobs()} == {j.id for j in jobs[ACK_CHUNK:]}  # the sent ones: no heartbeat

    # What was not sent is pending again, in order, ahead of the ack queued meanwhile.
    assert acks.pending() == len(jobs) - ACK_CHUNK + 1 and acks.due() is False
    retry = FakeDriver({q.COMPLETE_MANY: lambda op: len(ids_of(op)),
                        q.FAIL_MANY: lambda op: [(i, True) for i in ids_of(op)],
                        q.RELEASE_MANY: lambda op: [(i, True) for i in ids_of(op)]})
    assert retry.run(acks.sending()) is True
    assert retry.statements() == [q.COMPLETE_MANY, q.COMPLETE_MANY, q.FAIL_MANY, q.RELEASE_MANY]
    assert ids_of(retry.ops[0]) + ids_of(retry.ops[1]) == [j.id for j in completes[ACK_CHUNK:]] + [late.id]
    assert ids_of(retry.ops[2]) == [j.id for j in fails]
    assert retry.ops[2].params[1] == [f"boom {j.id}" for j in fails]  # type: ignore[union-attr]
    assert ids_of(retry.ops[3]) == [j.id for j in releases]
    assert acks.pending() == 0 and book.jobs() == []
    assert all(j._state is JobState.ACKED for j in [*jobs, late])


def test_a_transient_error_keeps_the_connection_and_closing_tries_twice(caplog: pytest.LogCaptureFixture
                                                                        ) -> None:
    acks = Acks(HeartbeatBook(), nothing)
    job = record(1)
    acks.complete_later(job)
    lock = psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    driver = FakeDriver({q.COMPLETE_MANY: [lock, lock]})
    with caplog.at_level(logging.WARNING, logger="pyqueue.worker"):
        driver.run(acks.closing())
    assert driver.statements() == [q.COMPLETE_MANY, q.COMPLETE_MANY]
    assert driver.of(Reset) == []  # not a lost connection: the connection is still good
    assert acks.pending() == 1 and job._state is JobState.ACK_QUEUED
    assert "1 acknowledgement(s) could not be sent" in caplog.text


def test_a_result_too_large_fails_only_its_own_job() -> None:
    acks = Acks(HeartbeatBook(), nothing)
    small, large = record(1), record(2)
    small._result, large._result = "s", "l"  # as the statement sees them: not None
    for job in (small, large):
        acks.complete_later(job)

    class TooLarge(psycopg.errors.DataError):
        sqlstate = TOO_LARGE

    driver = FakeDriver({q.COMPLETE_MANY_RESULTS: TooLarge("result too large"),
                         q.COMPLETE_RESULT: [True, TooLarge("result too large")], q.FAIL: True})
    assert driver.run(acks.sending()) is True
    assert driver.statements() == [q.COMPLETE_MANY_RESULTS, q.COMPLETE_RESULT, q.COMPLETE_RESULT, q.FAIL]
    failed = driver.of(Sql)[-1]
    assert isinstance(failed, Sql) and failed.params[0] == 2 and "result too large" in failed.params[1]


def test_leaving_with_job_queues_one_ack_and_calls_the_hook_once() -> None:
    calls: list[str] = []
    acks = Acks(HeartbeatBook(), lambda: calls.append("after_ack"))
    done, failed, expired = (record(n, kind=Job) for n in (1, 2, 3))
    for job in (done, failed, expired):
        job._acks = acks
    with done:
        pass
    with failed:
        raise ValueError("the handler broke")
    assert acks.expire_later(expired, "JobTimeout: job ran longer than 0:00:01")
    with expired:  # the handler returns late: its completion is discarded, the hook not called
        pass
    assert calls == ["after_ack", "after_ack"]
    batch = acks.take()
    assert batch.completes == [done] and [j for j, _ in batch.fails] == [failed, expired]
    assert "ValueError: the handler broke" in batch.fails[0][1]
    assert expired.timed_out and expired.acknowledged and not done.timed_out


def test_a_timeout_fails_a_running_job_once_and_gives_up_on_a_lost_one() -> None:
    acks = Acks(HeartbeatBook(), nothing)
    sends: list[int] = []
    given_up: list[JobRecord] = []
    running = RunningJobs(acks, lambda: sends.append(1), stopped=lambda: False, grace=None)
    running.on_expire = given_up.append
    late, lost, done = record(1), record(2), record(3)
    assert lost._on(Event.LOSE_LEASE) and acks.complete_later(done)
    for job in (late, lost, done):
        running.expire(job, "JobTimeout: job ran longer than 0:00:01")
    assert given_up == [late, lost]  # the Worker replaces their threads; done's handler returned
    assert sends == [1] and late.timed_out and not lost.timed_out
    batch = acks.take()
    assert batch.fails == [(late, "JobTimeout: job ran longer than 0:00:01")] and batch.completes == [done]
    running.close()


def test_the_shutdown_grace_fails_the_running_and_releases_the_unstarted() -> None:
    book = HeartbeatBook()
    acks = Acks(book, nothing)
    running = RunningJobs(acks, nothing, stopped=lambda: True, grace=2.0)
    started, waiting, finished = record(1), record(2, state=JobState.CLAIMED), record(3)
    book.add([started, waiting, finished], time.monotonic())
    running._running[started.id] = started  # what started() records, without the watchdog's thread
    acks.complete_later(finished)
    acks.take()
    running.abandon()
    batch = acks.take()
    assert [j for j, _ in batch.fails] == [started] and batch.releases == [waiting] and not batch.completes
    assert batch.fails[0][1].startswith("shutdown timeout: the job was still running 2 s")
    running.close()


# --- claims: lost, transient and fatal errors ------------------------------------------------

def settings(**changes: Any) -> WorkerSettings:
    values: dict[str, Any] = {"dsn": "host=/nowhere", "queues": ["q"], "lease": None, "poll_interval": 1.0,
                              "use_listen": True, "worker_name": "w", "reap_interval": None,
                              "run_schedules": False}
    values.update(changes)
    return WorkerSettings(**values)


def core(**changes: Any) -> ConsumerCore[JobRecord, None]:
    def make_jobs(rows: Claimed) -> list[JobRecord]:
        return [record(i, state=JobState.CLAIMED) for i in rows.column("id")]

    return ConsumerCore(settings(**changes), make_jobs, work=None, heartbeat=None, after_ack=nothing)


def claimed(*ids: int) -> Claimed:
    return Claimed(("id", "lease_seconds"), [list(ids), [30.0] * len(ids)])


CLAIM = q.claim_query(["q"], 10, "w", None)[0]


def test_a_lost_connection_backs_off_exponentially_and_a_claim_resets_it() -> None:
    consumer = core()
    driver = FakeDriver({CLAIM: [LOST, LOST, claimed(1, 2), LOST]})
    sleeps = []
    for _ in range(4):
        driver.ops.clear()
        jobs = driver.run(consumer.claiming(10))
        sleep = driver.of(Sleep)
        sleeps.append(sleep[0].seconds if sleep else None)  # type: ignore[union-attr]
        if jobs is None:
            assert driver.ops[0] == Listen() and Reset("work") in driver.ops and Reset("listen") in driver.ops
    assert RECONNECT_DELAY_MIN / 2 <= sleeps[0] <= RECONNECT_DELAY_MIN  # type: ignore[operator]
    assert RECONNECT_DELAY_MIN <= sleeps[1] <= 2 * RECONNECT_DELAY_MIN  # type: ignore[operator]
    assert sleeps[2] is None  # the claim went through
    assert RECONNECT_DELAY_MIN / 2 <= sleeps[3] <= RECONNECT_DELAY_MIN  # type: ignore[operator]  # reset


def test_a_claim_hands_out_the_rows_and_holds_them_for_heartbeats() -> None:
    consumer = core()
    jobs = FakeDriver({CLAIM: claimed(7, 8)}).run(consumer.claiming(10))
    assert [j.id for j in jobs or []] == [7, 8] and len(consumer.book) == 2
    assert consumer.listening


def test_a_transient_claim_error_sleeps_without_dropping_connections() -> None:
    consumer = core()
    driver = FakeDriver({CLAIM: psycopg.errors.LockNotAvailable("lock timeout")})
    assert driver.run(consumer.claiming(10)) is None
    assert driver.of(Reset) == [] and len(driver.of(Sleep)) == 1
    assert consumer.listening  # the LISTEN connection stays


REFUSED = [psycopg.errors.InvalidPassword("password authentication failed"),
           psycopg.OperationalError('FATAL:  role "x" does not exist'),
           psycopg.errors.InsufficientPrivilege("permission denied for function claim")]


@pytest.mark.parametrize("error", REFUSED)
def test_a_refused_login_or_grant_raises_at_once(error: psycopg.Error) -> None:
    with pytest.raises(type(error)):
        FakeDriver({CLAIM: error}).run(core().claiming(10))
    with pytest.raises(type(error)):  # the LISTEN connection's login too
        FakeDriver(listen=error).run(core().claiming(10))
    reaps = Every(0.001, first_after=0)
    with pytest.raises(type(error)):  # and maintenance's
        FakeDriver({q.REAP: error}).run(reaping(reaps))


def test_without_listen_the_worker_polls_and_claims_anyway() -> None:
    consumer = core()
    driver = FakeDriver({CLAIM: claimed()}, listen=psycopg.OperationalError("too many connections"))
    assert driver.run(consumer.claiming(10)) == []
    assert not consumer.listening and driver.statements() == [CLAIM]


# --- waiting: FOLLOWER_DELAY and the first responder ---------------------------------------

def wait_after_notify(responder: bool) -> FakeDriver:
    consumer = core()
    FakeDriver({CLAIM: claimed()}).run(consumer.claiming(10))  # opens LISTEN
    driver = FakeDriver({q.RESPONDER_LOCK: responder})
    work_at, _ = driver.run(consumer.preparing_wait(refresh=False, respond=True))
    assert driver.run(consumer.waited(notified=True, work_at=work_at)) is True
    return driver


def test_a_notified_follower_waits_follower_delay_and_the_responder_does_not() -> None:
    assert wait_after_notify(responder=False).of(Sleep) == [Sleep(FOLLOWER_DELAY)]
    assert wait_after_notify(responder=True).of(Sleep) == []


def test_a_worker_at_capacity_gives_the_responder_lock_up() -> None:
    consumer = core()
    FakeDriver({CLAIM: claimed()}).run(consumer.claiming(10))
    FakeDriver({q.RESPONDER_LOCK: True}).run(consumer.preparing_wait(refresh=False, respond=True))
    driver = FakeDriver({q.RESPONDER_UNLOCK: True})
    driver.run(consumer.preparing_wait(refresh=False, respond=False))
    assert driver.statements() == [q.RESPONDER_UNLOCK]
    assert wait_after_notify(responder=False).of(Sleep) == [Sleep(FOLLOWER_DELAY)]


def test_an_empty_claim_asks_for_the_next_run_at_before_waiting() -> None:
    consumer = core()
    FakeDriver({CLAIM: claimed()}).run(consumer.claiming(10))
    driver = FakeDriver({q.RESPONDER_LOCK: True, q.NEXT_RUN_IN: 0.0})
    work_at, timeout = driver.run(consumer.preparing_wait(refresh=True, respond=True))
    assert q.NEXT_RUN_IN in driver.statements() and timeout <= 0.001
    assert FakeDriver().run(consumer.waited(notified=False, work_at=work_at)) is True


def test_a_lost_listen_connection_makes_a_worker_with_room_claim_at_once() -> None:
    """A NOTIFY sent while LISTEN was down is gone: a worker with room claims
    at once (reopening LISTEN first) instead of sleeping until its next poll;
    one at capacity waits as before, and the claim ends the catch-up."""
    consumer = core(poll_interval=60.0)
    FakeDriver({CLAIM: claimed()}).run(consumer.claiming(10))  # opens LISTEN
    driver = FakeDriver({q.RESPONDER_LOCK: LOST})  # the first statement on it finds it gone
    work_at, timeout = driver.run(consumer.preparing_wait(refresh=False, respond=True))
    assert driver.of(Reset) == [Reset("listen")] and not consumer.listening
    assert timeout <= 0
    assert FakeDriver().run(consumer.waited(notified=False, work_at=work_at)) is True
    _, timeout = FakeDriver().run(consumer.preparing_wait(refresh=False, respond=False))
    assert timeout > 30  # at capacity: no claim could follow, the poll interval stands
    driver = FakeDriver({CLAIM: claimed()})
    driver.run(consumer.claiming(10))
    assert driver.of(Listen) == [Listen()] and consumer.listening
    driver = FakeDriver({q.RESPONDER_LOCK: True})
    _, timeout = driver.run(consumer.preparing_wait(refresh=False, respond=True))
    assert timeout > 30


# --- the main loop's decisions ---------------------------------------------------------------

def test_rounds_claim_while_the_handlers_have_work_and_stop_when_drained() -> None:
    rounds = Rounds(batch=10, threshold=4, leased=True)
    assert rounds.claim_now(4) and not rounds.claim_now(5)
    rounds.claimed(10)  # a full batch: there may be more
    assert rounds.want and not rounds.refresh
    rounds.claimed(3)  # short: drained for now, but not empty
    assert not rounds.want and not rounds.refresh and not rounds.claim_now(0)
    rounds.claimed(0)
    assert rounds.refresh  # empty: ask for the next run_at before waiting
    assert not Rounds(batch=10, threshold=4, leased=False).claim_now(0)  # no leased queue


def test_rounds_send_acks_a_batch_at_a_time_when_idle_or_when_they_waited() -> None:
    rounds = Rounds(batch=3, threshold=4, leased=True)
    acks = Acks(HeartbeatBook(), nothing, interval=3600)
    assert not rounds.send_acks_now(acks, held=0)  # nothing to send
    acks.complete_later(record(1))
    assert not rounds.send_acks_now(acks, held=5)  # busy, one ack, fresh
    assert rounds.send_acks_now(acks, held=0)  # idle
    for n in (2, 3):
        acks.complete_later(record(n))
    assert rounds.send_acks_now(acks, held=5)  # a batch's worth
    waited = Acks(HeartbeatBook(), nothing, interval=0)
    waited.complete_later(record(4))
    assert rounds.send_acks_now(waited, held=5)  # the oldest waited long enough


def test_both_backoffs_are_one_formula() -> None:
    backoff = Backoff(1.0, 8.0)
    for ceiling in (1.0, 2.0, 4.0, 8.0, 8.0):
        assert ceiling / 2 <= backoff.next_delay() <= ceiling
    backoff.reset()
    assert 0.5 <= backoff.next_delay() <= 1.0
    polls = PollBackoff(1.0, 5.0)
    assert polls.delay() == 1.0
    for ceiling in (2.0, 4.0, 5.0, 5.0):
        polls.claimed(False)
        assert ceiling / 2 <= polls.delay() <= ceiling
    polls.notified()
    assert polls.delay() == 1.0


# --- heartbeats ------------------------------------------------------------------------------

def due_book(*jobs: JobRecord) -> HeartbeatBook:
    book = HeartbeatBook()
    lease = min(j.lease_seconds or 0 for j in jobs)
    book.add(jobs, time.monotonic() - lease * book.fraction - 0.01)  # due just now
    return book


@pytest.mark.parametrize("error", [LOST, psycopg.errors.LockNotAvailable("lock timeout")])
def test_a_failed_heartbeat_is_tried_again_soon(error: psycopg.Error) -> None:
    one, two = record(1, lease=60), record(2, lease=60)
    book = due_book(one, two)
    driver = FakeDriver({q.HEARTBEAT_MANY: error})
    driver.run(beating(book, book.take_due()))
    assert driver.ops[0] == Sql(q.HEARTBEAT_MANY, driver.ops[0].params, rows="tuples", on="heartbeat")  # type: ignore[union-attr]
    assert (Reset("heartbeat") in driver.ops) is (error is LOST)
    wait = book.seconds_until_due()
    assert wait is not None and 0 < wait <= HEARTBEAT_RETRY_DELAY
    assert not one.lease_lost and not two.lease_lost


def test_a_heartbeat_renews_the_held_and_marks_a_lost_lease_unless_acked() -> None:
    held, lost, acked = record(1, lease=3), record(2, lease=3), record(3, lease=3)
    book = due_book(held, lost, acked)
    due = book.take_due()
    Acks(book, nothing).complete_later(acked)  # its handler finished while the heartbeat was out
    driver = FakeDriver({q.HEARTBEAT_MANY: [[(1, True), (2, False), (3, False)]]})
    driver.run(beating(book, due))
    assert lost.lease_lost and not held.lease_lost and not acked.lease_lost and acked.acknowledged
    assert {j.id for j in book.jobs()} == {1, 3}  # 3's ack keeps its lease alive until sent
    assert [j.id for j, _ in book.take_due()] == [3]  # 1 was renewed: due a third of its lease from now


# --- maintenance -------------------------------------------------------------------------------

def test_reaping_resets_a_lost_connection_and_runs_again_at_its_interval() -> None:
    reaps = Every(3600, first_after=0)
    driver = FakeDriver({q.REAP: LOST})
    driver.run(reaping(reaps))
    assert driver.ops == [Sql(q.REAP, driver.ops[0].params), Reset("work")]  # type: ignore[union-attr]
    assert FakeDriver().run(reaping(reaps)) is None  # not due again before its interval


def test_a_role_that_may_not_prune_stops_pruning_for_good() -> None:
    prunes = PruneTimer(reap_interval=30)
    prunes._every = Every(3600, first_after=0)
    driver = FakeDriver({PRUNE: psycopg.errors.InsufficientPrivilege("permission denied for function prune")})
    driver.run(pruning(prunes))
    assert driver.statements() == [PRUNE] and driver.of(Reset) == []
    assert prunes.seconds_left() == float("inf")


def test_maintaining_runs_the_schedules_the_prune_and_the_reap_each_when_due() -> None:
    consumer = core(run_schedules=True, reap_interval=30.0)
    consumer._reaps = Every(30.0, first_after=0)
    consumer.prunes._every = Every(30.0, first_after=0)
    driver = FakeDriver({q.RUN_SCHEDULES: 10.0, PRUNE: 0, q.REAP: 0})
    driver.run(consumer.maintaining())
    assert driver.statements() == [q.RUN_SCHEDULES, PRUNE, q.REAP]
    assert FakeDriver().run(consumer.maintaining()) is None  # none due again: no statement


# --- a job's state --------------------------------------------------------------------------

def reachable() -> set[JobState]:
    """Every state a claimed job can reach, whatever the events' order."""
    seen, todo = {JobState.CLAIMED}, [JobState.CLAIMED]
    while todo:
        state = todo.pop()
        for event in Event:
            new = TRANSITIONS.get((state, event))
            if new is not None and new not in seen:
                seen.add(new)
                todo.append(new)
    return seen


def test_every_state_is_reachable_and_none_says_two_contrary_things() -> None:
    assert reachable() == set(JobState)
    for state in JobState:
        job = record(1, state=state)
        assert not (job.lease_lost and job.acknowledged), state  # no ack counts once the lease is gone
        assert not (job.lease_lost and job.timed_out), state
    assert {s for s in JobState if record(1, state=s).acknowledged} == ACKNOWLEDGED


def test_a_job_ends_once_and_a_refused_move_changes_nothing() -> None:
    ends = {JobState.ACKED, JobState.LEASE_LOST, JobState.TIMED_OUT}
    for state, event in itertools.product(JobState, Event):
        job = record(1, state=state)
        moved = job._on(event)
        assert moved is ((state, event) in TRANSITIONS)
        assert job._state is (TRANSITIONS[(state, event)] if moved else state)
        if state in ends:
            assert not moved, (state, event)  # the end of the job for this process
    job = record(1, state=JobState.CLAIMED)
    assert job._on(Event.START) and not job._on(Event.START)  # one handler
    assert job._on(Event.QUEUE_ACK) and not job._on(Event.QUEUE_FAILURE)  # one ack
    lost = record(2, state=JobState.CLAIMED)
    assert lost._on(Event.LOSE_LEASE) and not lost._on(Event.START)  # a lost job is never started
    cancelled = record(3)
    assert cancelled._on(Event.TIME_OUT) and cancelled.timed_out and not cancelled.acknowledged
    assert not cancelled._on(Event.QUEUE_ACK)  # the cancelled handler's late completion
    assert cancelled._on(Event.QUEUE_FAILURE) and cancelled.timed_out and cancelled.acknowledged


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Threads switch every microsecond: races show up."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def race(*moves: Callable[[], bool]) -> list[bool]:
    """Run ``moves`` at the same moment, each in a thread; what each returned."""
    barrier = threading.Barrier(len(moves))
    results: list[bool] = [False] * len(moves)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = moves[index]()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(moves))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_a_handler_its_timeout_and_the_heartbeat_racing_leave_one_winner(switch_often: None) -> None:
    expected = {0: (JobState.ACK_QUEUED, 1, 0), 1: (JobState.TIMED_OUT, 0, 1), 2: (JobState.LEASE_LOST, 0, 0)}
    winners = set()
    for n in range(300):
        acks = Acks(HeartbeatBook(), nothing)
        job = record(n)
        won = race(partial(acks.complete_later, job),  # the handler returns
                   partial(acks.expire_later, job, "JobTimeout"),  # the watchdog fires
                   partial(job._on, Event.LOSE_LEASE))  # the heartbeat finds the lease gone
        assert won.count(True) == 1, won
        winner = won.index(True)
        winners.add(winner)
        batch = acks.take()
        assert (job._state, len(batch.completes), len(batch.fails)) == expected[winner]
        assert not batch.releases
    assert winners  # at least one of them won every time; which one is up to the scheduler


def test_many_handlers_acking_one_job_queue_one_ack(switch_often: None) -> None:
    for n in range(100):
        acks = Acks(HeartbeatBook(), nothing)
        job = record(n)
        won = race(*[partial(acks.complete_later, job)] * 4, *[partial(acks.fail_later, job, "x")] * 4)
        assert won.count(True) == 1 and acks.pending() == 1
