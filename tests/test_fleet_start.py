"""Workers started together (issue 24): each one's first ``jobq.reap()``
comes at a random point of its first reap interval, not at once (sixteen
workers starting together ran sixteen identical reaps, seconds of server
time with a backlog waiting); a worker that never reaps stays so."""

from __future__ import annotations

from pyqueue.worker.connections import DedicatedConnection
from pyqueue.worker.maintenance import Every
from pyqueue.worker.settings import WorkerSettings
from pyqueue.worker.sync_consumer import Consumer
from pyqueue.worker.wakeup import Wakeup

INTERVAL = 30.0  # seconds: the default reap_interval


def consumer(reap_interval: float | None) -> Consumer:
    """A consumer as a Worker makes it (no connection is opened before its first claim)."""
    dsn = "host=/nonexistent dbname=unused"
    settings = WorkerSettings(dsn, ["q"], None, 5.0, True, "w", reap_interval, run_schedules=False)
    return Consumer(settings, wakeup=Wakeup(), work=DedicatedConnection(dsn, "w", prepare=True),
                    heartbeat=DedicatedConnection(dsn, "h", prepare=True))


def test_the_first_reaps_of_workers_started_together_are_spread_over_the_interval() -> None:
    firsts = [consumer(INTERVAL)._reaps.seconds_left() for _ in range(20)]
    assert all(0.0 <= first <= INTERVAL for first in firsts), firsts
    assert max(firsts) > INTERVAL / 2 and len(set(firsts)) == len(firsts), firsts  # before: all 0


def test_a_spread_timer_is_due_within_its_first_interval_and_none_never() -> None:
    timer = Every.spread(0.001)
    assert timer.seconds_left() <= 0.001
    never = Every.spread(None)
    assert not never.due() and never.seconds_left() == float("inf")
    assert consumer(None)._reaps.seconds_left() == float("inf")
