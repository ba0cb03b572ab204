"""Handlers that the CLI tests run with ``pyqueue worker tests.cli_handlers:…``."""

from __future__ import annotations

import os

import pyqueue

INSTANCE_QUEUE = "cli-instance"  # the queue of the configured Worker below


def handle(job: pyqueue.Job) -> None:
    """Succeed, unless the payload asks to fail."""
    if job.payload.get("fail"):
        raise RuntimeError(f"asked to fail: {job.payload['fail']}")


# A Worker configured in code, for `pyqueue worker tests.cli_handlers:worker`.
# The test passes the database in CLI_HANDLERS_DSN.
worker = pyqueue.Worker(os.environ.get("CLI_HANDLERS_DSN", ""), concurrency=2, poll_interval=0.5,
                        name="configured-worker")
worker.register(INSTANCE_QUEUE, handle)
