"""The handler the fair-queue tests run in real worker processes:

    python -m pyqueue worker tests.fair_programs:noop --dsn DSN -q QUEUE ...

It does nothing: the tests read the order jobs were claimed and finished
from jobq's history (the queue keeps it), not from the handler.
"""

from __future__ import annotations

from pyqueue import Job


def noop(job: Job) -> None:
    """Complete the job at once."""
    del job
