"""A worker program for the multi-process tests:

    python -m tests.worker_programs DSN [--mode MODE] [options]

MODE: listen (default), worker, aio-listen, aio-worker, tx-worker, tx-listen.

Its handler records every execution in the ``executions`` table (see
tests/worker_support.py) with database timestamps. A payload may ask the
handler to sleep (``{"sleep": seconds}``) or to block forever on its first
attempt (``{"block_first": true}``), to be killed there.

The in-transaction modes (``tx-*``) also write a ``ledger`` row per job
through ``job.conn``, inside the transaction that holds the job.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

import pyqueue
from pyqueue import aio

BLOCK = 3600.0  # seconds: "forever" for a job that waits to be killed

_local = threading.local()


def connection(dsn: str) -> psycopg.Connection[Any]:
    """This thread's own autocommit connection for the recordings."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(dsn, autocommit=True, application_name="test-recorder")
    return conn


def make_handler(dsn: str) -> pyqueue.worker.Handler:
    def handle(job: pyqueue.Job) -> None:
        conn = connection(dsn)
        row = conn.execute(
            "INSERT INTO executions (job_id, pid, attempt, started) VALUES (%s, %s, %s, clock_timestamp()) "
            "RETURNING id", (job.id, os.getpid(), job.attempts),
        ).fetchone()
        assert row is not None
        pause = float(job.payload.get("sleep", 0))
        if job.payload.get("block_first") and job.attempts == 1:
            pause = BLOCK
        if pause:
            time.sleep(pause)
        conn.execute("UPDATE executions SET finished = clock_timestamp() WHERE id = %s", (row[0],))

    return handle


def make_tx_handler(dsn: str) -> pyqueue.worker.TxHandler:
    def handle(job: pyqueue.TxJob) -> None:
        job.conn.execute("INSERT INTO ledger (job_id, pid) VALUES (%s, %s)", (job.id, os.getpid()))
        conn = connection(dsn)
        conn.execute("INSERT INTO executions (job_id, pid, attempt, started) "
                     "VALUES (%s, %s, %s, clock_timestamp())", (job.id, os.getpid(), job.attempts))
        pause = float(job.payload.get("sleep", 0))
        if job.payload.get("block_first") and job.attempts == 1:
            pause = BLOCK
        if pause:
            time.sleep(pause)

    return handle


class AsyncRecorder:
    """The same handler for the asyncio workers, on one async connection."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def __call__(self, job: aio.AsyncJob) -> None:
        if self.conn is not None and (self.conn.closed or self.conn.broken):
            await self.conn.close()  # the database restarted under us: record on a new connection
            self.conn = None
        if self.conn is None:
            self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True,
                                                              application_name="test-recorder")
        cur = await self.conn.execute(
            "INSERT INTO executions (job_id, pid, attempt, started) VALUES (%s, %s, %s, clock_timestamp()) "
            "RETURNING id", (job.id, os.getpid(), job.attempts),
        )
        row = await cur.fetchone()
        assert row is not None
        pause = float(job.payload.get("sleep", 0))
        if job.payload.get("block_first") and job.attempts == 1:
            pause = BLOCK
        if pause:
            await asyncio.sleep(pause)
        await self.conn.execute("UPDATE executions SET finished = clock_timestamp() WHERE id = %s", (row[0],))


async def run_async(args: argparse.Namespace, lease: timedelta | None) -> None:
    handler = AsyncRecorder(args.dsn)
    if args.mode == "aio-listen":
        await aio.listen(args.dsn, args.queue, handler, batch_size=args.batch_size, lease=lease,
                         poll_interval=args.poll_interval, reap_interval=args.reap_interval,
                         shutdown_timeout=args.shutdown_timeout)
    else:
        worker = aio.AsyncWorker(args.dsn, concurrency=args.concurrency, batch_size=args.batch_size,
                                 lease=lease, poll_interval=args.poll_interval,
                                 reap_interval=args.reap_interval, shutdown_timeout=args.shutdown_timeout)
        worker.register(args.queue, handler)
        await worker.run()
    if handler.conn is not None:
        await handler.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    modes = ["listen", "worker", "aio-listen", "aio-worker", "tx-worker", "tx-listen"]
    parser.add_argument("--mode", choices=modes, default="listen")
    parser.add_argument("--queue", default="work")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lease", type=float, default=None, help="seconds")
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--reap-interval", type=float, default=30.0)
    parser.add_argument("--shutdown-timeout", type=float, default=30.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {os.getpid()} %(name)s: %(message)s")
    lease = None if args.lease is None else timedelta(seconds=args.lease)
    handler = make_handler(args.dsn)
    if args.mode.startswith("aio-"):
        asyncio.run(run_async(args, lease))
    elif args.mode == "tx-listen":
        pyqueue.listen(args.dsn, args.queue, make_tx_handler(args.dsn), batch_size=args.batch_size,
                       poll_interval=args.poll_interval, in_transaction=True)
    elif args.mode == "tx-worker":
        tx_worker = pyqueue.Worker(args.dsn, concurrency=args.concurrency, batch_size=args.batch_size,
                                   poll_interval=args.poll_interval)
        tx_worker.register(args.queue, make_tx_handler(args.dsn), in_transaction=True)
        tx_worker.run()
    elif args.mode == "listen":
        pyqueue.listen(args.dsn, args.queue, handler, batch_size=args.batch_size, lease=lease,
                       poll_interval=args.poll_interval, reap_interval=args.reap_interval,
                       shutdown_timeout=args.shutdown_timeout)
    else:
        worker = pyqueue.Worker(args.dsn, concurrency=args.concurrency, batch_size=args.batch_size,
                                lease=lease, poll_interval=args.poll_interval,
                                reap_interval=args.reap_interval, shutdown_timeout=args.shutdown_timeout)
        worker.register(args.queue, handler)
        worker.run()
    logging.getLogger("tests.worker_programs").info("worker exits normally")


if __name__ == "__main__":
    main()
