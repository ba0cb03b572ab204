"""What a worker does for the database now and then, as a script of its
consumer (``pyqueue.worker.consumer``): run the worker-run periodic jobs
when due (``schedules``), prune (``prune``), and call ``jobq.reap()`` every
reap interval so that jobs of dead workers come back even without pg_cron.
A failure is logged and tried again later; a lost connection is dropped
(the next claim reconnects); a refused login or grant raises."""

from __future__ import annotations

import logging

import psycopg

from pyqueue import _queries as q
from pyqueue.defaults import PRUNE_BATCH, REAP_BATCH
from pyqueue.errors import translate_errors
from pyqueue.worker.auth import raise_if_fatal
from pyqueue.worker.bookkeeping import Every
from pyqueue.worker.prune import PRUNE, PruneTimer
from pyqueue.worker.schedules import ScheduleTimer
from pyqueue.worker.scripts import Reset, Script, Sql, lost_connection

logger = logging.getLogger("pyqueue.worker")


def maintaining(reaps: Every, schedules: ScheduleTimer, prunes: PruneTimer) -> Script[None]:
    """The periodic jobs, a prune and a reap, each when its timer says so."""
    if schedules.due():
        try:
            with translate_errors():
                schedules.result((yield Sql(q.RUN_SCHEDULES)))
        except psycopg.Error as error:
            if schedules.error(error):
                yield from _reset_if_lost(error)
    if prunes.due():
        try:
            with translate_errors():
                prunes.pruned((yield Sql(PRUNE, (PRUNE_BATCH,))))
        except psycopg.Error as error:
            if prunes.error(error):
                yield from _reset_if_lost(error)
    if not reaps.due():
        return
    reaps.restart()
    try:
        with translate_errors():
            reaped = int((yield Sql(q.REAP, (REAP_BATCH,))))
    except psycopg.Error as error:
        raise_if_fatal(error)
        logger.warning("jobq.reap() failed: %s", error)
        yield from _reset_if_lost(error)  # the next claim reconnects
        return
    if reaped:
        logger.info("reaped %d job(s) whose lease had expired", reaped)


def _reset_if_lost(error: psycopg.Error) -> Script[None]:
    if lost_connection(error):
        yield Reset("work")
