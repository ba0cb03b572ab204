"""The decision core after a failover, without a database (issue 26, item 3):
an error that means "this server takes no writes now" (SQLSTATE 25006 from
a standby or a primary fenced read-only; 55000 "recovery is in progress")
is a lost connection to every script of the worker (reconnect, back off,
put the acks back), never a job's failure. tests/test_failover.py shows it
on a real primary and standby; here each script is driven by
tests/test_consumer_core.py's FakeDriver.
"""

from __future__ import annotations

import time

import psycopg
import psycopg.errors
import pytest

from pyqueue import _queries as q
from pyqueue.job import JobState
from pyqueue.worker.acknowledgement import Acks
from pyqueue.worker.heartbeats import HeartbeatBook, beating
from pyqueue.worker.maintenance import Every, reaping
from pyqueue.worker.scripts import Listen, Reset, ServerReadOnly, Sleep, as_reconnect, read_only_server
from tests.test_consumer_core import CLAIM, FakeDriver, claimed, core, nothing, record

READ_ONLY = [
    psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
    psycopg.errors.ReadOnlySqlTransaction("cannot execute LISTEN during recovery"),
    psycopg.errors.ObjectNotInPrerequisiteState("recovery is in progress"),
]


@pytest.mark.parametrize("error", READ_ONLY, ids=["read-only", "during-recovery", "recovery-in-progress"])
def test_a_read_only_server_is_a_lost_connection_to_a_claim(error: psycopg.Error) -> None:
    consumer = core()
    driver = FakeDriver({CLAIM: [error, claimed(1)]})
    assert driver.run(consumer.claiming(10)) is None  # backed off, not raised out of the worker
    assert driver.ops[0] == Listen() and Reset("work") in driver.ops and Reset("listen") in driver.ops
    assert len(driver.of(Sleep)) == 1
    assert [j.id for j in driver.run(consumer.claiming(10)) or []] == [1]  # the next claim reconnects


@pytest.mark.parametrize("error", READ_ONLY[:1])
def test_acks_refused_by_a_read_only_server_stay_pending_and_no_attempt_is_failed(error: psycopg.Error
                                                                                  ) -> None:
    book = HeartbeatBook()
    acks = Acks(book, nothing)
    done, failed = record(1), record(2)
    book.add([done, failed], time.monotonic())
    acks.complete_later(done)
    acks.fail_later(failed, "its handler raised")
    driver = FakeDriver({q.COMPLETE_MANY: error})
    assert driver.run(acks.sending()) is False
    assert driver.ops[-1] == Reset("work")  # that connection is of no use any more
    assert acks.pending() == 2 and done._state is JobState.ACK_QUEUED  # sent again after reconnecting
    retry = FakeDriver({q.COMPLETE_MANY: 1, q.FAIL_MANY: [[(2, True)]]})
    assert retry.run(acks.sending()) is True and acks.pending() == 0


def test_a_heartbeat_refused_by_a_read_only_server_drops_its_connection() -> None:
    job = record(1, lease=60)
    book = HeartbeatBook()
    book.add([job], time.monotonic() - 60)
    driver = FakeDriver({q.HEARTBEAT_MANY: READ_ONLY[0]})
    driver.run(beating(book, book.take_due()))
    assert Reset("heartbeat") in driver.ops and not job.lease_lost


def test_a_reap_refused_by_a_read_only_server_drops_its_connection() -> None:
    driver = FakeDriver({q.REAP: READ_ONLY[0]})
    driver.run(reaping(Every(3600, first_after=0)))
    assert driver.ops[-1] == Reset("work")


def test_only_read_only_errors_become_a_lost_connection() -> None:
    for error in READ_ONLY:
        lost = as_reconnect(error)
        assert isinstance(lost, ServerReadOnly) and isinstance(lost, psycopg.OperationalError)
        assert lost.__cause__ is error and read_only_server(lost) and as_reconnect(lost) is lost
    others = [psycopg.errors.ObjectNotInPrerequisiteState("cursor is not open"),
              psycopg.errors.UniqueViolation("duplicate key"), ValueError("not a database error")]
    for other in others:
        assert not read_only_server(other) and as_reconnect(other) is other
