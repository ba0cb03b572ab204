"""The sizes of one ``pyqueue bench`` run: the defaults of a full run and of
``--quick``. Explicit command-line options override either."""

from __future__ import annotations

from dataclasses import dataclass

from pyqueue.defaults import CONCURRENCY

STEP_TIMEOUT = 600.0  # seconds any one measurement may take before it counts as stuck


@dataclass(frozen=True)
class Config:
    """How much each section of a run does."""

    jobs: int = 30_000  # jobs per fixed-size throughput measurement
    batch: int = 100  # jobs per INSERT / enqueue_many / DELETE / claim / complete_many
    connections: int = 4  # producers or consumers in the SQL-only one-phase measurements
    workers: tuple[int, ...] = (4, 8)  # consumers (pyqueue worker processes) in the end-to-end runs
    repeat: int = 2  # rounds of every throughput comparison and scaling point; the best of each counts
    scaling: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # consumers per scaling point
    window: float = 2.0  # seconds measured per scaling point
    warmup: float = 0.5  # seconds a scaling point runs before its window starts
    latency_samples: int = 300  # single jobs enqueued for the pickup latency
    latency_interval: float = 0.02  # seconds between them, on average (jittered ±50 %)
    latency_workers: int = 2  # idle listening worker processes
    worker_concurrency: int = CONCURRENCY  # handler threads per pyqueue worker process (pyqueue's default)
    soak_minutes: float = 0.0  # 0: no soak
    soak_sample: float = 60.0  # seconds per soak sample
    quick: bool = False


QUICK = Config(jobs=10_000, workers=(4,), repeat=1, scaling=(1, 4, 32), window=0.8, warmup=0.2,
               latency_samples=60, quick=True)
