"""A jobq worker with asyncpg: LISTEN for wake-ups, claim jobs in batches, run a handler per job, then
complete or fail each job with the lease token claim returned (asyncpg's UUID, passed back as it came).

    DATABASE_URL=postgresql://user@host/db python worker.py [queue ...]     (default queue: "default")
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import sys
from typing import Any

import asyncpg  # type: ignore[import-untyped]

QUEUES = sys.argv[1:] or ["default"]
BATCH = int(os.environ.get("JOBQ_BATCH", "10"))  # jobs per claim
POLL = float(os.environ.get("JOBQ_POLL_SECONDS", "5"))  # seconds: the safety net when no NOTIFY comes
NAME = f"asyncpg-{os.getpid()}"


def log(message: str) -> None:
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    print(f"{now} {NAME} {message}", flush=True)


async def handle(job: Any, payload: dict[str, Any], beat: Any) -> None:
    """The work: replace with yours; raise to fail the job (jobq retries it after a backoff). This one
    obeys its payload: {"steps": 3} works in 3 steps and heart-beats after each one (a long job keeps its
    lease), {"fail_once": true} fails its first attempt."""
    for _ in range(int(payload.get("steps", 0))):
        await asyncio.sleep(0.2)
        await beat()
    if payload.get("fail_once") and job["attempts"] == 1:
        raise RuntimeError("failing the first attempt, as asked")


async def main() -> None:
    db = await asyncpg.connect(os.environ["DATABASE_URL"], server_settings={"application_name": NAME})
    wake = asyncio.Event()  # a NOTIFY for our queues, or a stop
    stopping = False

    def stop() -> None:
        nonlocal stopping
        log("stopping after the job in hand")
        stopping = True
        wake.set()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    await db.add_listener("jobq", lambda *note: wake.set() if note[3] in QUEUES else None)
    log(f"listening on channel jobq for queues {', '.join(QUEUES)}")

    async def run(job: Any) -> None:
        async def beat() -> None:  # extends the lease; false when it was lost
            if await db.fetchval("SELECT jobq.heartbeat($1, $2)", job["id"], job["lease_token"]):
                log(f"heartbeat on job {job['id']}")
            else:
                log(f"lease lost on job {job['id']} (heartbeat returned false)")
        try:
            await handle(job, json.loads(job["payload"]), beat)
        except Exception as error:  # jobq keeps the text as the job's last_error
            if await db.fetchval("SELECT jobq.fail($1, $2, $3)", job["id"], repr(error), job["lease_token"]):
                log(f"failed job {job['id']} (attempt {job['attempts']}): {error}")
            else:
                log(f"lease lost on job {job['id']} (fail returned false)")
            return
        if await db.fetchval("SELECT jobq.complete($1, $2)", job["id"], job["lease_token"]):
            log(f"completed job {job['id']}")
        else:
            log(f"lease lost on job {job['id']} (complete returned false)")

    idle = False
    while not stopping:
        wake.clear()
        jobs = await db.fetch("SELECT * FROM jobq.claim($1::text[], $2, $3)", QUEUES, BATCH, NAME)
        for i, job in enumerate(jobs):
            if stopping:  # never started: give them back without spending an attempt
                for rest in jobs[i:]:
                    await db.fetchval("SELECT jobq.release($1, $2)", rest["id"], rest["lease_token"])
                log(f"released {len(jobs) - i} unstarted jobs")
                break
            await run(job)
        if jobs:
            idle = False
            continue
        # Nothing ready: sleep until a NOTIFY, the next scheduled job (a retry in backoff), or the poll.
        due = await db.fetchval("SELECT extract(epoch FROM jobq.next_run_at($1) - now())", QUEUES)
        if not idle:
            log(f"idle: waiting for NOTIFY, polling every {POLL:g} s")
        idle = True
        try:
            await asyncio.wait_for(wake.wait(), min(POLL, float(due)) if due is not None else POLL)
        except TimeoutError:
            await db.execute("SELECT jobq.reap()")  # expired leases back to the queue (as pg_cron does)
    await db.close()
    log("stopped")


if __name__ == "__main__":
    asyncio.run(main())
