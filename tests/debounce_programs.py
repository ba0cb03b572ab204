"""The processes of the debounce race test (tests/test_debounce.py):

    python -m tests.debounce_programs DSN produce --producer P --rounds N --count K --delay S --go PREFIX
    python -m tests.debounce_programs DSN work --stop FILE --work S

``produce`` connects, says so in ``PREFIX.ready.P``, then for each round R of N: waits until the file
``PREFIX-R`` exists (so that every producer's burst starts at once),
enqueues K times the job of key ``k`` in queue ``deb`` with
on_duplicate 'replace' (run_at: now() + S), each in its own transaction
that also takes the next number of ``deb_counter`` and logs it in
``deb_log`` with the payload's token and the id enqueue returned, and says
it is done in ``PREFIX-R.P``. The
counter is taken after the enqueue and its row lock is held until the
commit, so the numbers give the commit order of the enqueues.

``work`` is a worker: it claims one job at a time, "works" S seconds,
records the run in ``deb_runs`` (job id, token) and completes the job, until
FILE exists.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg

import pyqueue

TABLES_DDL = """
CREATE TABLE deb_counter (n bigint NOT NULL);
INSERT INTO deb_counter VALUES (0);
CREATE TABLE deb_log (
    n      bigint PRIMARY KEY,
    round  integer NOT NULL,
    token  text NOT NULL,
    job_id bigint NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE deb_runs (
    job_id bigint NOT NULL,
    token  text NOT NULL,
    pid    integer NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
QUEUE = "deb"
KEY = "k"
IDLE_POLL = 0.01  # seconds between two empty claims of a worker


def produce(dsn: str, producer: int, *, rounds: int, count: int, delay: float, go: str) -> None:
    # synchronous_commit off: the enqueues of a burst serialize on the job's
    # row lock, so a commit that waits for the disk would stretch the burst.
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
        Path(f"{go}.ready.{producer}").touch()
        for round_no in range(rounds):
            while not Path(f"{go}-{round_no}").exists():
                time.sleep(0.002)
            for i in range(count):
                token = f"{round_no}:{producer}:{i}"
                with conn.transaction():
                    job_id = pyqueue.enqueue(conn, QUEUE, {"token": token}, delay=delay, key=KEY,
                                             on_duplicate="replace")
                    conn.execute("WITH c AS (UPDATE deb_counter SET n = n + 1 RETURNING n) "
                                 "INSERT INTO deb_log (n, round, token, job_id) "
                                 "SELECT c.n, %s, %s, %s FROM c",
                                 (round_no, token, job_id))
            Path(f"{go}-{round_no}.{producer}").touch()


def work(dsn: str, stop: Path, seconds: float) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.exists():
            jobs = pyqueue.claim(conn, QUEUE, 1, lease=60)
            if not jobs:
                time.sleep(IDLE_POLL)
                continue
            for job in jobs:
                time.sleep(seconds)
                conn.execute("INSERT INTO deb_runs (job_id, token, pid) VALUES (%s, %s, %s)",
                             (job.id, job.payload["token"], os.getpid()))
                if not job.complete():
                    sys.exit(f"job {job.id}: lease lost")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("mode", choices=("produce", "work"))
    parser.add_argument("--producer", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--go")
    parser.add_argument("--stop", type=Path)
    parser.add_argument("--work", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.mode == "produce":
        produce(args.dsn, args.producer, rounds=args.rounds, count=args.count, delay=args.delay, go=args.go)
    else:
        work(args.dsn, args.stop, args.work)


if __name__ == "__main__":
    main()
