"""The worker program of the failover tests (tests/test_failover.py):

    python -m tests.failover_programs DSN RUNS_FILE --mode MODE --queue QUEUE [options]

MODE: worker (``pyqueue.Worker``), aio-worker (``AsyncWorker``), listen
(``pyqueue.listen``), aio-listen (``pyqueue.aio.listen``), tx-worker (a
``Worker`` whose queue is worked ``in_transaction``: its handler also
inserts the job's id into the ``ledger`` table through ``job.conn``, in the
transaction that takes the job, so a run whose batch did not commit leaves
no row).

Its handler writes a line to RUNS_FILE when a job starts and another when it
ends (``start|end JOB_ID ATTEMPT PID WALL_TIME``), appended in one write each
(O_APPEND): the database is what fails over here, so the record of what ran
is kept outside it. A payload may ask for a pause (``{"sleep": seconds}``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from datetime import timedelta

import pyqueue
from pyqueue import aio


class Runs:
    """The run log: one line per handler start and end."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def write(self, what: str, job: pyqueue.Job | aio.AsyncJob | pyqueue.TxJob) -> None:
        os.write(self.fd, f"{what} {job.id} {job.attempts} {os.getpid()} {time.time():.6f}\n".encode())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("runs")
    parser.add_argument("--mode", required=True,
                        choices=["worker", "aio-worker", "listen", "aio-listen", "tx-worker"])
    parser.add_argument("--queue", required=True)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=5)
    parser.add_argument("--lease", type=float, default=30.0, help="seconds")
    parser.add_argument("--poll-interval", type=float, default=60.0)
    parser.add_argument("--reap-interval", type=float, default=2.0, help="seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {os.getpid()} %(name)s: %(message)s")
    runs = Runs(args.runs)
    lease = timedelta(seconds=args.lease)
    batch, poll, reap = args.batch_size, args.poll_interval, args.reap_interval

    def handle(job: pyqueue.Job) -> None:
        runs.write("start", job)
        time.sleep(float(job.payload.get("sleep", 0)))
        runs.write("end", job)

    async def ahandle(job: aio.AsyncJob) -> None:
        runs.write("start", job)
        await asyncio.sleep(float(job.payload.get("sleep", 0)))
        runs.write("end", job)

    def tx_handle(job: pyqueue.TxJob) -> None:
        runs.write("start", job)
        job.conn.execute("INSERT INTO ledger (job_id) VALUES (%s)", (job.id,))
        time.sleep(float(job.payload.get("sleep", 0)))
        runs.write("end", job)

    if args.mode == "tx-worker":
        tx_worker = pyqueue.Worker(args.dsn, concurrency=args.concurrency, batch_size=batch,
                                   poll_interval=poll)
        tx_worker.register(args.queue, tx_handle, in_transaction=True)
        tx_worker.run()
    elif args.mode == "worker":
        worker = pyqueue.Worker(args.dsn, concurrency=args.concurrency, batch_size=batch, lease=lease,
                                poll_interval=poll, reap_interval=reap)
        worker.register(args.queue, handle)
        worker.run()
    elif args.mode == "aio-worker":
        aworker = aio.AsyncWorker(args.dsn, concurrency=args.concurrency, batch_size=batch, lease=lease,
                                  poll_interval=poll, reap_interval=reap)
        aworker.register(args.queue, ahandle)
        asyncio.run(aworker.run())
    elif args.mode == "listen":
        pyqueue.listen(args.dsn, args.queue, handle, batch_size=batch, lease=lease, poll_interval=poll,
                       reap_interval=reap)
    else:
        asyncio.run(aio.listen(args.dsn, args.queue, ahandle, batch_size=batch, lease=lease,
                               poll_interval=poll, reap_interval=reap))
    logging.getLogger("tests.failover_programs").info("worker exits normally")


if __name__ == "__main__":
    main()
