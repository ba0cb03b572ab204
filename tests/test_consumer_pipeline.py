"""A worker's acks sent ahead of its next claim, in the claim's round trip
(issue 24), without a database: the consumer core's scripts run by the fake
driver of ``test_consumer_core`` (a :class:`Pipelined` op is answered step by
step, and its first error undoes the whole of it, as one implicit
transaction does on the server). What needs the server (the transaction,
the order the server sees) is in ``test_ack_pipeline``."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import psycopg.errors
import pytest

from pyqueue import _queries as q
from pyqueue.job import JobRecord, JobState
from pyqueue.worker.acknowledgement import ACK_CHUNK, TOO_LARGE
from pyqueue.worker.consumer import ConsumerCore
from pyqueue.worker.scripts import Op, Pipelined, Reset, Sleep, Sql
from pyqueue.worker.worker_core import Rounds
from tests.test_consumer_core import CLAIM, LOST, FakeDriver, claimed, core, ids_of, record

RESULTS = {q.COMPLETE_MANY: lambda op: len(ids_of(op)),
           q.FAIL_MANY: lambda op: [(i, True) for i in ids_of(op)],
           q.RELEASE_MANY: lambda op: [(i, True) for i in ids_of(op)]}


def holding(consumer: ConsumerCore[JobRecord, None], *ids: int) -> list[Any]:
    """Jobs the consumer holds (heart-beaten), running (as ``record`` makes them)."""
    jobs = [record(i) for i in ids]
    consumer.book.add(jobs, time.monotonic())
    return jobs


def pipelines(driver: FakeDriver) -> list[Pipelined]:
    return [op for op in driver.ops if isinstance(op, Pipelined)]


def test_the_pending_acks_go_ahead_of_the_claim_in_its_round_trip() -> None:
    consumer = core()
    done, failed, released = holding(consumer, 1, 2, 3), holding(consumer, 4), holding(consumer, 5)
    for job in done:
        assert consumer.acks.complete_later(job)
    assert consumer.acks.fail_later(failed[0], "boom")
    assert consumer.acks.release_later(released[0])
    driver = FakeDriver({**RESULTS, CLAIM: claimed(7, 8)})
    jobs = driver.run(consumer.claiming(10, acks_at_least=5))
    assert [j.id for j in jobs or []] == [7, 8]
    (pipeline,) = pipelines(driver)
    assert not driver.of(Sql)  # every statement went in the pipeline: one round trip
    assert [step.query for step in pipeline.steps] == [q.COMPLETE_MANY, q.FAIL_MANY, q.RELEASE_MANY, CLAIM]
    assert [ids_of(step) for step in pipeline.steps[:3]] == [[1, 2, 3], [4], [5]]
    assert pipeline.steps[1].params[1] == ["boom"]
    assert all(j._state is JobState.ACKED for j in [*done, *failed, *released])
    assert consumer.acks.pending() == 0
    assert sorted(j.id for j in consumer.book.jobs()) == [7, 8]  # the acked ones: no more heartbeats


def test_fewer_acks_than_asked_for_stay_pending_and_the_claim_goes_alone() -> None:
    consumer = core()
    for job in holding(consumer, 1, 2):
        consumer.acks.complete_later(job)
    driver = FakeDriver({CLAIM: claimed(7)})
    assert [j.id for j in driver.run(consumer.claiming(10, acks_at_least=3)) or []] == [7]
    assert driver.statements() == [CLAIM] and not pipelines(driver)
    assert consumer.acks.pending() == 2
    plain = FakeDriver({CLAIM: claimed()})  # and a claim that asks for none sends none
    plain.run(consumer.claiming(10))
    assert plain.statements() == [CLAIM] and consumer.acks.pending() == 2


def test_more_acks_than_one_statement_takes_wait_for_the_usual_way() -> None:
    consumer = core()
    for job in holding(consumer, *range(1, ACK_CHUNK + 2)):
        consumer.acks.complete_later(job)
    driver = FakeDriver({CLAIM: claimed()})
    driver.run(consumer.claiming(10, acks_at_least=1))
    assert driver.statements() == [CLAIM] and consumer.acks.pending() == ACK_CHUNK + 1


def test_a_lost_pipeline_puts_its_acks_back_in_front_in_order_and_the_next_claim_sends_them(
        caplog: pytest.LogCaptureFixture) -> None:
    consumer = core()
    jobs = holding(consumer, 1, 2, 3)
    for job in jobs:
        consumer.acks.complete_later(job)
    late = holding(consumer, 9)[0]

    def lost_on_the_way(op: Op) -> Any:
        assert consumer.acks.complete_later(late)  # a handler finishes while the pipeline is out
        raise LOST

    driver = FakeDriver({**RESULTS, CLAIM: lost_on_the_way})
    with caplog.at_level(logging.WARNING, logger="pyqueue.worker"):
        assert driver.run(consumer.claiming(10, acks_at_least=1)) is None
    assert "could not acknowledge 4 job(s) yet" in caplog.text
    assert Reset("work") in driver.ops and len(driver.of(Sleep)) == 1  # reconnect, back off
    assert all(j._state is JobState.ACK_QUEUED for j in [*jobs, late])
    assert sorted(j.id for j in consumer.book.jobs()) == [1, 2, 3, 9]  # still heart-beaten
    assert consumer.acks.pending() == 4

    retry = FakeDriver({**RESULTS, CLAIM: claimed(10)})
    assert [j.id for j in retry.run(consumer.claiming(10, acks_at_least=1)) or []] == [10]
    (pipeline,) = pipelines(retry)
    assert ids_of(pipeline.steps[0]) == [1, 2, 3, 9]  # the put-back ones first, in order
    assert all(j._state is JobState.ACKED for j in [*jobs, late]) and consumer.acks.pending() == 0


class TooLarge(psycopg.errors.DataError):
    sqlstate = TOO_LARGE


def test_a_refused_pipeline_sends_its_acks_the_usual_way_then_claims_alone() -> None:
    consumer = core()
    small, large = holding(consumer, 1, 2)
    small._result, large._result = "s", "l"
    for job in (small, large):
        consumer.acks.complete_later(job)
    refused = TooLarge("result too large")
    driver = FakeDriver({q.COMPLETE_MANY_RESULTS: [refused, refused], q.COMPLETE_RESULT: [True, refused],
                         q.FAIL: True, CLAIM: claimed(7)})
    assert [j.id for j in driver.run(consumer.claiming(10, acks_at_least=1)) or []] == [7]
    assert [step.query for step in pipelines(driver)[0].steps] == [q.COMPLETE_MANY_RESULTS, CLAIM]
    # Undone with it: one job at a time (the too-large result fails its own job), then the claim.
    assert driver.statements()[2:] == [q.COMPLETE_MANY_RESULTS, q.COMPLETE_RESULT, q.COMPLETE_RESULT,
                                       q.FAIL, CLAIM]
    assert small._state is JobState.ACKED and large._state is JobState.ACKED
    assert consumer.acks.pending() == 0


def test_a_claim_refused_in_the_pipeline_still_gets_its_acks_through_then_raises() -> None:
    consumer = core()
    jobs = holding(consumer, 1, 2)
    for job in jobs:
        consumer.acks.complete_later(job)
    denied = psycopg.errors.InsufficientPrivilege("permission denied for function claim")
    driver = FakeDriver({**RESULTS, CLAIM: [denied, denied]})
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        driver.run(consumer.claiming(10, acks_at_least=1))
    assert driver.statements() == [q.COMPLETE_MANY, CLAIM, q.COMPLETE_MANY, CLAIM]
    assert all(j._state is JobState.ACKED for j in jobs) and consumer.acks.pending() == 0


def test_rounds_send_the_acks_with_a_claim_from_the_smaller_of_batch_and_concurrency() -> None:
    assert Rounds(batch=100, threshold=10, leased=True).acks_with_claim() == 10
    assert Rounds(batch=1, threshold=8, leased=True).acks_with_claim() == 1
