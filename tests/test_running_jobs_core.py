"""Cancel notices and progress reports in the worker's decision core, without
a database (issue 26): a jobq_cancel notice acts only on a job held under
that very lease; reports coalesce to the latest value, sent once when due
or with the job's heartbeat, put back when the statement fails, and a value
over the cap is dropped alone."""

from __future__ import annotations

import time

from psycopg.types.json import Jsonb

from pyqueue import _queries as q
from pyqueue.errors import PayloadTooLarge
from pyqueue.job import Job, JobState
from pyqueue.worker.acknowledgement import Acks
from pyqueue.worker.heartbeats import HEARTBEAT_RETRY_DELAY, HeartbeatBook, beating
from tests.test_consumer_core import LOST, FakeDriver, core, due_book, nothing, record


def test_a_cancel_notice_acts_only_on_a_job_held_under_that_lease() -> None:
    consumer = core()
    mine, other, waiting = record(1, kind=Job), record(2), record(3, state=JobState.CLAIMED)
    consumer.held([mine, other, waiting], time.monotonic())
    told: list[int] = []
    mine._on_lost = lambda: told.append(mine.id)
    flag = other.cancelled_event  # made before the notice: set by it
    stale = f"{other.id}:00000000-0000-0000-0000-000000000000"
    assert consumer.noted("jobq_cancel", f"{stale} 99:{mine.lease_token} garbage x:y {mine.id}") is False
    assert not mine.cancel_requested and not other.cancel_requested and not flag.is_set()
    both = f"{mine.id}:{mine.lease_token} {waiting.id}:{waiting.lease_token}"
    assert consumer.noted("jobq_cancel", both) is False
    assert mine.cancel_requested and mine.lease_lost and told == [1]
    assert mine.cancelled_event.is_set() and mine.sleep(5) is True  # at once
    assert waiting.lease_lost  # held, never started: the worker skips it
    assert not other.cancel_requested
    assert consumer.noted("jobq_cancel", f"{mine.id}:{mine.lease_token}") is False and told == [1]  # once
    assert consumer.noted("jobq", "q") is True and consumer.noted("jobq", "elsewhere") is False


def test_an_acked_job_is_not_cancelled_by_a_late_notice() -> None:
    consumer = core()
    job = record(1)
    consumer.held([job], time.monotonic())
    Acks(consumer.book, nothing).complete_later(job)
    consumer.noted("jobq_cancel", f"{job.id}:{job.lease_token}")
    assert job.acknowledged and not job.cancel_requested


def test_reports_coalesce_to_the_latest_value_sent_once() -> None:
    job = record(1, lease=300)
    book = HeartbeatBook(progress_interval=60)
    book.add([job], time.monotonic())
    woken: list[float] = []
    book.wake = woken.append
    for k in range(50):
        assert book.report(job, Jsonb({"done": k}))
    assert len(woken) == 1  # one wake-up for the first report, none for the 49 that replaced it
    driver = FakeDriver({q.PROGRESS_MANY: [[(1, True)]]})
    driver.run(beating(book, book.take_due(), book.take_progress([])))
    [sent] = driver.ops
    assert sent.params[2][0].obj == {"done": 49}  # type: ignore[union-attr]
    assert book.report(job, Jsonb({"done": 50}))
    assert book.take_progress([]) == []  # due PROGRESS_INTERVAL after the last one sent
    wait = book.seconds_until_due()
    assert wait is not None and 50 < wait <= 60
    [(taken, value)] = book.take_progress([(job, None)])  # type: ignore[list-item]
    assert taken is job and value.obj == {"done": 50}  # type: ignore[union-attr]
    assert not book.report(record(2), Jsonb(1))  # not held: nothing kept


def test_progress_goes_with_a_heartbeat_and_comes_back_when_unsent() -> None:
    job = record(1, lease=3)
    book = due_book(job)
    book.progress_interval = 60
    book.report(job, Jsonb(0.5))
    book.take_progress([])  # the first one went
    book.report(job, Jsonb(0.7))
    due = book.take_due()
    driver = FakeDriver({q.PROGRESS_MANY: LOST, q.HEARTBEAT_MANY: [[(1, True)]]})
    driver.run(beating(book, due, book.take_progress(due)))
    assert driver.statements() == [q.PROGRESS_MANY, q.HEARTBEAT_MANY]  # with the heartbeat
    wait = book.seconds_until_due()
    assert wait is not None and wait <= HEARTBEAT_RETRY_DELAY  # put back, due again soon
    [(_, value)] = book.take_progress([(job, None)])  # type: ignore[list-item]
    assert value.obj == 0.7  # type: ignore[union-attr]


def test_a_value_over_the_cap_is_dropped_alone_and_a_refused_one_means_the_lease_is_lost() -> None:
    big, fine, gone = record(1), record(2), record(3)
    too_large = PayloadTooLarge("jobq: progress is 9000 bytes, over the queue's cap of 100 bytes")

    def answer(op: object) -> object:
        ids = op.params[0]  # type: ignore[attr-defined]
        if 1 in ids:
            raise too_large
        return [(i, i != 3) for i in ids]

    driver = FakeDriver({q.PROGRESS_MANY: answer})
    driver.run(beating(HeartbeatBook(), [], [(big, Jsonb("x")), (fine, Jsonb(1)), (gone, Jsonb(2))]))
    assert len(driver.statements()) == 4  # the three together, then one by one
    assert not big.lease_lost and not fine.lease_lost and gone.lease_lost
