"""The sizes of one ``pyqueue bench`` run: the defaults of a full run and of
``--quick``. Explicit command-line options override either."""

from __future__ import annotations

from dataclasses import dataclass

from pyqueue.defaults import CONCURRENCY

STEP_TIMEOUT = 600.0  # seconds any one measurement may take before it counts as stuck


@dataclass(frozen=True)
class Config:
    """How much each section of a run does."""

    drain_jobs: int = 50_000  # pre-filled jobs per drain measurement (issue 11: 50,000)
    drain_workers: tuple[int, ...] = (4, 16)  # worker processes W per drain row (issue 11: 4 and 16)
    leased_jobs: int = 10_000  # long-leased, never finished jobs ahead of the "leased ahead" drain
    leased_workers: int = 4  # worker processes in the "leased ahead" drain
    single_jobs: int = 20_000  # pre-filled jobs per one-connection SQL measurement
    jobs: int = 30_000  # jobs per enqueue measurement (INSERT vs enqueue_many)
    batch: int = 100  # jobs per INSERT / enqueue_many / DELETE / claim / take / complete_many / batch_size
    connections: int = 4  # producers in the enqueue measurement
    repeat: int = 5  # interleaved rounds of every comparison (drain, enqueue, one connection, latency: once)
    statistic: str = "median"  # what counts of the rounds: "median" (the middle run) or "best" (the fastest)
    scaling: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # consumers per scaling point
    scaling_repeat: int = 1  # rounds of the scaling runs (a window each; not a goal of issue 11)
    window: float = 2.0  # seconds measured per scaling point
    warmup: float = 0.5  # seconds a scaling point runs before its window starts
    latency_samples: int = 300  # single jobs enqueued for the pickup latency
    latency_interval: float = 0.02  # seconds between them, on average (jittered ±50 %)
    latency_workers: int = 16  # idle listening worker processes (issue 11: 16)
    worker_concurrency: int = CONCURRENCY  # handler threads per pyqueue worker process (pyqueue's default)
    soak_minutes: float = 0.0  # 0: no soak
    soak_sample: float = 60.0  # seconds per soak sample
    quick: bool = False


QUICK = Config(drain_jobs=10_000, leased_jobs=2_000, single_jobs=5_000, jobs=10_000, repeat=1,
               scaling=(1, 4, 32), window=0.8, warmup=0.2, latency_samples=60, latency_workers=8, quick=True)
