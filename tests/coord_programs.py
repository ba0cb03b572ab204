"""Worker programs that tests/test_coordination.py runs as real processes and
kills with SIGKILL while they hold a concurrency slot.

    python -m tests.coord_programs committed DSN QUEUE LEASE_SECONDS
        claim one job (autocommit: the claim is committed, the job runs
        under its lease), print its id, then hang as if stuck in the handler
    python -m tests.coord_programs open DSN QUEUE
        claim one job inside a transaction that stays open, print its id,
        then hang (a worker killed in the middle of its claim transaction)
"""

from __future__ import annotations

import sys
import time

import psycopg

HANG = 3600.0  # seconds: longer than any test; the test kills us first


def main(argv: list[str]) -> int:
    mode, dsn, queue = argv[0], argv[1], argv[2]
    if mode == "committed":
        lease = f"{float(argv[3])} seconds"
        conn = psycopg.connect(dsn, autocommit=True)
        row = conn.execute(
            "SELECT id FROM jobq.claim(%s, 1, 'doomed', %s::interval)", (queue, lease)
        ).fetchone()
    elif mode == "open":
        conn = psycopg.connect(dsn, autocommit=False)
        row = conn.execute("SELECT id FROM jobq.claim(%s, 1, 'doomed')", (queue,)).fetchone()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(row[0] if row is not None else "none", flush=True)
    time.sleep(HANG)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
