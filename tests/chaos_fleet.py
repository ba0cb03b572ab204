"""A fleet of worker processes (``python -m tests.worker_programs``) that a
chaos test kills and replaces, and the Jepsen-style check of what happened
to every job: lost, duplicated (explained by a kill or not), unexpected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

import psycopg

from tests.worker_support import ROOT, WorkerProcess

Conn = psycopg.Connection[Any]

# The four worker loops pyqueue has, so that every one of them is killed at some point.
SHAPES: tuple[tuple[str, ...], ...] = (
    ("--mode", "listen", "--batch-size", "10"),
    ("--mode", "worker", "--concurrency", "2", "--batch-size", "5"),
    ("--mode", "aio-listen", "--batch-size", "10"),
    ("--mode", "aio-worker", "--concurrency", "2", "--batch-size", "5"),
)


class ProgramProcess(WorkerProcess):
    """A WorkerProcess running another worker program module (same options)."""

    def __init__(self, module: str, dsn: str, log_dir: Path, *args: str) -> None:
        self.log = log_dir / f"worker-{time.monotonic_ns()}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, dsn, *args],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )


class Fleet:
    """Worker processes started with the same options; thread-safe.

    ``module`` is the worker program (tests.worker_programs by default).
    """

    def __init__(self, dsn: str, log_dir: Path, rand: Random, *options: str,
                 module: str = "tests.worker_programs") -> None:
        self.module = module
        self.dsn = dsn
        self.log_dir = log_dir
        self.rand = rand
        self.options = options
        self.lock = threading.Lock()
        self.running: list[WorkerProcess] = []
        self.started: list[WorkerProcess] = []
        self.killed_pids: set[int] = set()

    def start(self, count: int = 1) -> None:
        for _ in range(count):
            with self.lock:
                shape = SHAPES[len(self.started) % len(SHAPES)]
                worker = ProgramProcess(self.module, self.dsn, self.log_dir, *shape, *self.options)
                self.running.append(worker)
                self.started.append(worker)

    def kill_one(self, among: set[int] | None = None) -> int | None:
        """SIGKILL a random running worker (one whose pid is in ``among``, when
        given); its pid (None when none runs, or none of those)."""
        with self.lock:
            candidates = [w for w in self.running if among is None or w.pid in among]
            if not candidates:
                return None
            victim = candidates[self.rand.randrange(len(candidates))]
            self.running.remove(victim)
            self.killed_pids.add(victim.pid)
        victim.signal(signal.SIGKILL)
        victim.wait()
        return victim.pid

    def crashed(self) -> list[WorkerProcess]:
        """Workers that exited on their own (none should)."""
        with self.lock:
            return [w for w in self.running if w.proc.poll() is not None]

    def stop(self) -> list[tuple[int, int, str]]:
        """SIGTERM every running worker; (pid, exit code, log) of those that did not exit 0."""
        with self.lock:
            workers, self.running = self.running, []
        for worker in workers:
            worker.signal(signal.SIGTERM)
        bad = []
        for worker in workers:
            code = worker.wait()
            if code != 0:
                bad.append((worker.pid, code, worker.output()))
        return bad

    def kill_all(self) -> None:
        with self.lock:
            workers, self.running = self.running, []
        for worker in workers:
            worker.kill()


@dataclass
class Verdict:
    """What happened to every job, Jepsen-style."""

    enqueued: int
    lost: list[int] = field(default_factory=list)  # never completed
    unexpected: list[int] = field(default_factory=list)  # ran or completed, never enqueued
    duplicated: dict[int, int] = field(default_factory=dict)  # job -> completed runs (> 1)
    unexplained: list[int] = field(default_factory=list)  # duplicated with no killed holder
    acked_without_run: list[int] = field(default_factory=list)  # completed in jobq, handler never finished
    interrupted_runs: int = 0  # handler runs cut short by a kill
    run_again: int = 0  # jobs that needed more than one attempt


def judge(conn: Conn, queue: str, enqueued: list[int], killed_pids: set[int]) -> Verdict:
    """Classify every job of ``queue`` from the ``executions`` table (one row per
    handler run, ``finished`` set when the handler returned) and jobq's archive.

    A duplicate is explained when at most one of its completed runs happened in
    a worker that was never killed: a worker killed after its handler returned
    but before its acknowledgement reached the database is the one way
    at-least-once delivery runs a job twice.
    """
    wanted = set(enqueued)
    runs: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for job_id, pid, finished in conn.execute(
        "SELECT job_id, pid, finished IS NOT NULL FROM executions ORDER BY id"
    ).fetchall():
        runs[int(job_id)].append((int(pid), bool(finished)))
    completed = {int(r[0]): int(r[1]) for r in conn.execute(
        "SELECT id, attempts FROM jobq._job_archive WHERE queue = %s AND status = 'completed'", (queue,)
    ).fetchall()}
    finished = Counter({job: sum(1 for _, done in job_runs if done) for job, job_runs in runs.items()})

    verdict = Verdict(enqueued=len(wanted))
    verdict.lost = sorted(j for j in wanted if j not in completed or finished[j] == 0)
    verdict.unexpected = sorted((set(runs) | set(completed)) - wanted)
    verdict.duplicated = {j: n for j, n in finished.items() if n > 1}
    verdict.unexplained = sorted(
        j for j in verdict.duplicated
        if sum(1 for pid, done in runs[j] if done and pid not in killed_pids) > 1
    )
    verdict.acked_without_run = sorted(j for j in completed if finished[j] == 0)
    verdict.interrupted_runs = sum(1 for job_runs in runs.values() for _, done in job_runs if not done)
    verdict.run_again = sum(1 for attempts in completed.values() if attempts > 1)
    return verdict
