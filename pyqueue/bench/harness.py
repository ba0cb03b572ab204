"""The process harness of ``pyqueue bench``: run driver loops in separate
processes (one database connection each), start them together, and count
what they did.

Every driver is a module-level function ``loop(task, signals)`` that connects,
calls ``signals.ready()`` (which blocks until every driver is connected),
then works until ``signals.stopped`` and reports progress with
``signals.add(n)`` after each committed batch. The parent only reads the
shared counters, so measuring costs the server nothing.

Processes come from the ``forkserver`` start method: a child never inherits
the parent's open connections (a forked libpq socket closed by a child would
end the parent's session), and starting 32 of them stays cheap.

The parent also reads the counted drivers' own CPU time and context
switches (all their threads, from ``/proc``; Linux only, else none) since
the go: :meth:`Run.client_usage`, the client's cost per job beside the
jobs/s.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

POLL_INTERVAL = 0.002  # seconds between the parent's looks at the counters
READY_TIMEOUT = 60.0  # seconds for every driver to connect
JOIN_TIMEOUT = 10.0  # seconds a driver gets to finish after stop, before SIGTERM
# Imported once by the fork server, so that each driver process starts warm.
PRELOAD = ["psycopg", "pyqueue", "pyqueue.bench.sql_loops", "pyqueue.bench.worker_loops"]


def progress(message: str) -> None:
    """One line of progress on stderr (stdout gets the results table)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While in the block (in the main thread), the first SIGTERM raises
    SystemExit(143), so the with-blocks it interrupts unwind: the driver
    processes are stopped and joined, PgBouncer and the throwaway server
    stopped and deleted. By default SIGTERM ends the program at once and
    leaves all of them running. A second SIGTERM acts as it would have."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, previous)
        progress("SIGTERM: stopping the drivers and the servers first")
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def ratio(value: float, floor: float) -> float | None:
    """value / floor, rounded; None without a floor to compare with."""
    return round(value / floor, 3) if floor > 0 else None


class BenchError(RuntimeError):
    """A benchmark step failed (a driver crashed, timed out, or the setup is unusable)."""


@dataclass(frozen=True)
class Task:
    """What one driver process does.

    ``quota``: jobs to produce (producers), 0 for consumers that run until
    stopped. ``rate``: jobs/s a producer keeps to, 0 for as fast as it can.
    ``options``: loop-specific settings (plain values, picklable)."""

    dsn: str
    queue: str
    batch: int
    worker: str
    quota: int = 0
    rate: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Signals:
    """A driver's view of the shared state: its counter slot, the start and
    stop events, and a queue for samples (latencies) it reports."""

    counts: Any  # multiprocessing RawArray of c_longlong, one slot per driver
    events: Any  # the same, for incidents a driver recovered from (deadlocks)
    slot: int
    ready_count: Synchronized[int]
    go: Event
    stop: Event
    samples: Any  # multiprocessing Queue of picklable values (e.g. (job number, time) pairs)

    def ready(self) -> None:
        """Announce that this driver is connected; block until all are."""
        with self.ready_count.get_lock():
            self.ready_count.value += 1
        self.go.wait()

    def add(self, n: int) -> None:
        with _ADD_LOCK:  # handlers may count from several threads
            self.counts[self.slot] += n

    def incident(self) -> None:
        with _ADD_LOCK:
            self.events[self.slot] += 1

    def sample(self, value: object) -> None:
        self.samples.put(value)

    @property
    def stopped(self) -> bool:
        return self.stop.is_set()


Loop = Callable[[Task, Signals], None]
_ADD_LOCK = threading.Lock()  # per process: Signals.add from handler threads


@dataclass(frozen=True)
class Role:
    """A group of drivers running the same loop. ``counted``: whether their
    counters are what the measurement counts (consumers, not producers)."""

    loop: Loop
    tasks: Sequence[Task]
    counted: bool = True


@dataclass(frozen=True)
class Outcome:
    """Jobs counted over a measured interval, and incidents the drivers
    recovered from (e.g. deadlocks) during the whole run."""

    jobs: int
    seconds: float
    incidents: int = 0
    usage: Usage | None = None  # the counted drivers' CPU time and context switches, when read

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_job(self) -> float | None:
        """Client CPU microseconds per job (all the drivers' threads), when read."""
        return None if self.usage is None or not self.jobs else self.usage.cpu_seconds * 1e6 / self.jobs

    @property
    def switches_per_job(self) -> float | None:
        return None if self.usage is None or not self.jobs else self.usage.switches / self.jobs

    def as_dict(self) -> dict[str, float | int]:
        result: dict[str, float | int] = {"jobs": self.jobs, "seconds": round(self.seconds, 4),
                                          "jobs_per_s": round(self.jobs_per_s, 1)}
        if (cpu := self.cpu_us_per_job) is not None and (switches := self.switches_per_job) is not None:
            result.update(client_cpu_us_per_job=round(cpu, 2), context_switches_per_job=round(switches, 3))
        return result


@dataclass(frozen=True)
class Usage:
    """CPU seconds (user + system) and context switches (voluntary and not) of processes."""

    cpu_seconds: float
    switches: int

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu_seconds - other.cpu_seconds, self.switches - other.switches)


def process_usage(pid: int) -> Usage:
    """A live process's CPU time and context switches so far, every thread's
    (Linux /proc; zero when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        switches = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/status") as status:
                switches += sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
    except (OSError, ValueError, IndexError):
        return Usage(0.0, 0)
    return Usage(cpu, switches)


def context() -> BaseContext:
    """The multiprocessing context every benchmark process comes from."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def _child(loop: Loop, task: Task, signals: Signals, errors: Any) -> None:
    """Process entry point: run the loop, report a crash as a traceback."""
    try:
        loop(task, signals)
    except BaseException:
        errors.put(f"{getattr(loop, '__name__', loop)} ({task.worker}):\n{traceback.format_exc()}")
        raise SystemExit(1) from None


class Run:
    """Driver processes started together; measure with ``until_count`` or
    ``for_duration``, then leave the ``with`` block to stop and join them."""

    def __init__(self, roles: Sequence[Role], *, timeout: float) -> None:
        self.ctx = context()
        self.roles = roles
        self.timeout = timeout
        self.size = sum(len(role.tasks) for role in roles)
        self.counts: Any = self.ctx.RawArray(ctypes.c_longlong, max(self.size, 1))
        self.events: Any = self.ctx.RawArray(ctypes.c_longlong, max(self.size, 1))
        self.ready_count: Synchronized[int] = self.ctx.Value(ctypes.c_int, 0)
        self.go = self.ctx.Event()
        self.stop = self.ctx.Event()
        self.errors: Any = self.ctx.Queue()
        self.samples: Any = self.ctx.Queue()
        self.processes: list[BaseProcess] = []
        self.collected: list[object] = []
        self.counted_slots: list[int] = []
        self.started_at = 0.0
        self._usage_at_go = Usage(0.0, 0)

    def __enter__(self) -> Run:
        try:
            for role in self.roles:
                for task in role.tasks:
                    slot = len(self.processes)
                    signals = Signals(self.counts, self.events, slot, self.ready_count, self.go, self.stop,
                                      self.samples)
                    process = self.ctx.Process(  # type: ignore[attr-defined]
                        target=_child, args=(role.loop, task, signals, self.errors),
                        name=f"bench-{task.worker}", daemon=True)
                    process.start()
                    self.processes.append(process)
                    if role.counted:
                        self.counted_slots.append(slot)
            deadline = time.monotonic() + READY_TIMEOUT
            while self.ready_count.value < self.size:
                self.check()
                if time.monotonic() > deadline:
                    raise BenchError(f"{self.size - self.ready_count.value} of {self.size} drivers did not "
                                     f"connect within {READY_TIMEOUT:.0f} s")
                time.sleep(POLL_INTERVAL)
            self._usage_at_go = self._usage()
            self.started_at = time.perf_counter()
            self.go.set()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _usage(self) -> Usage:
        usage = Usage(0.0, 0)
        for slot in self.counted_slots:
            pid = self.processes[slot].pid
            if pid is not None:
                one = process_usage(pid)
                usage = Usage(usage.cpu_seconds + one.cpu_seconds, usage.switches + one.switches)
        return usage

    def client_usage(self) -> Usage:
        """The counted drivers' CPU time and context switches since the go."""
        return self._usage() - self._usage_at_go

    def incidents(self) -> int:
        return sum(int(self.events[slot]) for slot in range(self.size))

    def counted(self) -> int:
        return sum(int(self.counts[slot]) for slot in self.counted_slots)

    def check(self) -> None:
        """Raise BenchError when a driver crashed."""
        for process in self.processes:
            if process.exitcode not in (None, 0):
                details: list[str] = []
                with contextlib.suppress(queue_module.Empty):
                    while True:
                        details.append(self.errors.get(timeout=0.5))
                text = "\n".join(details) or f"{process.name} exited with code {process.exitcode}"
                raise BenchError(f"a benchmark driver failed:\n{text}")

    def until_count(self, target: int) -> Outcome:
        """Wait until the counted drivers did ``target`` jobs; time since go."""
        deadline = self.started_at + self.timeout
        while (done := self.counted()) < target:
            self.check()
            if time.perf_counter() > deadline:
                raise BenchError(f"only {done} of {target} jobs done after {self.timeout:.0f} s")
            time.sleep(POLL_INTERVAL)
        return Outcome(done, time.perf_counter() - self.started_at, self.incidents())

    def for_duration(self, seconds: float, *, warmup: float = 0.0) -> Outcome:
        """Jobs the counted drivers did during ``seconds`` after ``warmup``."""
        self.sleep(warmup)
        begin, start = self.counted(), time.perf_counter()
        self.sleep(seconds)
        end, stop = self.counted(), time.perf_counter()
        return Outcome(end - begin, stop - start, self.incidents())

    def sleep(self, seconds: float) -> None:
        """Sleep while watching for crashed drivers."""
        deadline = time.perf_counter() + seconds
        while (left := deadline - time.perf_counter()) > 0:
            self.check()
            time.sleep(min(left, 0.05))

    def drain_samples(self) -> list[object]:
        """Every sample the drivers reported so far (and not taken before)."""
        self._receive_samples()
        found, self.collected = self.collected, []
        return found

    def _receive_samples(self) -> None:
        """Keep the samples waiting in the pipe in ``collected``."""
        with contextlib.suppress(queue_module.Empty):
            while True:
                self.collected.append(self.samples.get_nowait())

    def close(self) -> None:
        """Stop every driver, wait for it, SIGTERM the ones that hang."""
        self.stop.set()
        self.go.set()  # a driver still waiting to start must see the stop too
        deadline = time.monotonic() + JOIN_TIMEOUT
        for process in self.processes:
            # Keep the sample pipe empty: a child exits only once its queued
            # samples are flushed into it.
            while process.is_alive() and time.monotonic() < deadline:
                self._receive_samples()
                process.join(0.05)
        for process in self.processes:
            if process.is_alive():
                process.terminate()
                process.join(1.0)
