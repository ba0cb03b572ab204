"""A benchmark driver loop for tests/test_bench.py, in a module of its own:
the benchmark's driver processes (multiprocessing, forkserver) import it by
name."""

from __future__ import annotations

import time

from pyqueue.bench.harness import Signals, Task

LATE = 2.5  # seconds after its count that each sample is reported: past the settle time and the sends


def late_sampler(task: Task, signals: Signals) -> None:
    """Counts ``task.batch`` jobs at once and reports their samples only
    ``LATE`` seconds afterwards, as a busy machine's multiprocessing queue
    feeder may: a count is shared memory, a sample goes through a pipe."""
    signals.ready()
    signals.add(task.batch)
    time.sleep(LATE)
    for number in range(task.batch):
        signals.sample((number, time.time()))
    while not signals.stopped:
        time.sleep(0.01)
