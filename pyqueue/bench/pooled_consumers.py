"""The consumer processes of ``python -m pyqueue.bench.pooler``: each runs
hundreds of ``pyqueue.aio.listen`` loops, one client connection each, and
reports every job id it handled and every error it saw to a file of its own
when stopped."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pyqueue.aio
from pyqueue.bench.harness import Role, Signals, Task
from pyqueue.localserver import temporary_directory


class Warnings(logging.Handler):
    """Counts what the workers log at WARNING or above (lost connections,
    failed claims): each is a connection error for this benchmark."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def consumers(task: Task, signals: Signals) -> None:
    """task.options["consumers"] pyqueue.aio.listen loops on task.dsn (with
    task.options' listen settings) until stopped; then report the ids they
    handled and the errors they saw as one sample."""
    asyncio.run(_consume(task, signals))


async def _consume(task: Task, signals: Signals) -> None:
    warnings = Warnings()
    logging.getLogger("pyqueue.worker").addHandler(warnings)
    handled: list[int] = []
    stop = asyncio.Event()
    options = dict(task.options)
    count = int(options.pop("consumers"))
    report = Path(str(options.pop("report")))

    async def handle(job: pyqueue.aio.AsyncJob) -> None:
        handled.append(job.id)
        signals.add(1)

    signals.ready()
    loops = [asyncio.create_task(pyqueue.aio.listen(
        task.dsn, task.queue, handle, stop=stop, batch_size=task.batch, handle_signals=False,
        reap_interval=None, run_schedules=False, worker_name=f"{task.worker}-{k}", **options))
        for k in range(count)]
    while not signals.stopped:
        await asyncio.sleep(0.05)
    # Report first, to a file of its own (a sample through the harness's
    # queue was lost when a process with hundreds of connections took longer
    # to close them than the harness waits): the jobs were all handled and
    # acknowledged before the stop.
    done = [loop for loop in loops if loop.done()]
    raised = [repr(loop.exception()) for loop in done if not loop.cancelled() and loop.exception()]
    report.write_text(json.dumps({"handled": handled, "errors": warnings.messages + raised}))
    stop.set()
    await asyncio.gather(*loops, return_exceptions=True)


def role(dsn: str, queue: str, batch: int, *, consumers_total: int, processes: int,
         options: dict[str, Any]) -> Role:
    """The consumers split between the processes, each with its report file."""
    per_process = [consumers_total // processes + (1 if k < consumers_total % processes else 0)
                   for k in range(processes)]
    reports = temporary_directory("jobq-bench-pooler-")
    tasks = [Task(dsn, queue, batch, f"consumer-{k + 1}",
                  options={"consumers": n, "report": str(reports / f"consumer-{k + 1}.json"), **options})
             for k, n in enumerate(per_process) if n]
    return Role(consumers, tasks)


def reports_of(role: Role) -> list[Path]:
    return [Path(str(task.options["report"])) for task in role.tasks]


def collect(reports: list[Path]) -> tuple[Counter[int], list[str]]:
    """Every job id the consumer processes handled (with how often) and every
    error they saw, from the report each wrote as it stopped."""
    handled: Counter[int] = Counter()
    errors: list[str] = []
    for path in reports:
        if not path.exists():
            errors.append(f"{path.stem} reported nothing")
            continue
        found = cast("dict[str, Any]", json.loads(path.read_text()))
        handled.update(found["handled"])
        errors += found["errors"]
    return handled, errors
