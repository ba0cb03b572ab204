"""A worker fleet survives a primary failover (issue 26, item 3).

A real primary and its synchronous streaming standby (tests/failover_support.py);
worker processes of every loop pyqueue has (``Worker``, ``AsyncWorker``,
``listen()``, ``aio.listen()``: tests/failover_programs.py), a producer
and ``pyqueue dashboard``, all on the multi-host DSN
(``target_session_attrs=read-write``). Mid-drain the primary dies (``pg_ctl
stop -m immediate``) and the standby is promoted; nobody is restarted.

What must hold, checked against the standby's state at the failover (read
between the primary's death and the promotion: exactly what was committed):

- every job whose enqueue returned before the failover is there, and every
  job ends completed;
- a job completed at the failover never runs again; only a job running at
  the failover may run twice (at-least-once), and no job starts twice
  after it;
- no attempt is burned by the failover: no failure is recorded, and only a
  job running at the failover may have one more attempt;
- a workflow's child never starts before its parent ended;
- every worker process carries on without a restart, re-LISTENs (each
  works its own queue and polls only once a minute: a job enqueued after
  the drain reaches it by NOTIFY) and exits 0 on SIGTERM;
- the dashboard serves again after the failover.

The time from the promotion to the first job completed on the new primary
is printed and recorded (``make chaos``: JOBQ_CHAOS_REPORT), never
asserted. ``make test`` runs it at scale 1; ``make chaos`` with more jobs
and a longer drain.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

import pyqueue
from tests.chaos_support import install_script, keep_history, report, scale, scaled
from tests.dashboard_http_support import dashboard
from tests.doc_blocks import blocks, documents
from tests.failover_support import Cluster, Conn, cluster
from tests.worker_support import ROOT, wait_until

pytestmark = pytest.mark.xdist_group("failover")  # its servers use fixed ports in their own directories

SHAPES = ["worker", "aio-worker", "listen", "aio-listen", "tx-worker"]  # one process each at scale 1
CHAOS_SHAPES = ["worker", "aio-worker"]  # one more of each under make chaos
JOB_SLEEP = 0.03  # seconds a handler takes
LEASE = 5.0  # seconds: a lease nobody holds any more runs out soon
STOP_TIMEOUT = 30.0  # seconds a worker gets to exit after SIGTERM
FENCED = 1.0  # seconds the primary refuses writes before it goes


# --- the fleet and the producer ----------------------------------------------------

@dataclass
class Process:
    mode: str
    queue: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_fleet(dsn: str, runs: Path, scratch: Path) -> list[Process]:
    shapes = SHAPES + (CHAOS_SHAPES if scale() > 1 else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    fleet = []
    for i, mode in enumerate(shapes):
        queue, log = f"fo{i}", scratch / f"worker-{i}-{mode}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.failover_programs", dsn, str(runs), "--mode", mode,
                 "--queue", queue, "--lease", str(LEASE)],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        fleet.append(Process(mode, queue, proc, log))
    return fleet


@dataclass
class Producer:
    """Enqueues jobs (and, every tenth, a chain of two on different queues)
    in a thread, on the multi-host DSN, through the failover: an enqueue that
    returned is committed; one that raised may or may not be."""

    cluster: Cluster
    queues: list[str]
    interval: float  # seconds between enqueues
    committed: dict[int, float] = field(default_factory=dict)  # job id -> time.time() its enqueue returned
    chains: list[tuple[int, int]] = field(default_factory=list)  # (parent, child)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        conn: Conn | None = None
        while not self.stop.is_set():
            try:
                conn = conn if conn is not None and not conn.closed else self.cluster.connect()
                queue = self.queues[n % len(self.queues)]
                if n % 10 == 9:
                    child_queue = self.queues[(n + 1) % len(self.queues)]
                    ids = pyqueue.chain(conn, [(queue, {"n": n, "sleep": JOB_SLEEP}),
                                               (child_queue, {"n": n, "child": True})])
                    self.chains.append((ids[0], ids[1]))
                else:
                    ids = [pyqueue.enqueue(conn, queue, {"n": n, "sleep": JOB_SLEEP})]
                now = time.time()
                for job_id in ids:
                    self.committed[job_id] = now
            except (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction) as error:
                self.errors.append(str(error).splitlines()[0])
                if conn is not None:
                    conn.close()
                conn = None
                self.stop.wait(0.2)
            n += 1
            self.stop.wait(self.interval)
        if conn is not None:
            conn.close()


# --- what happened -------------------------------------------------------------

@dataclass
class Run:
    job: int
    attempt: int
    pid: int
    started: float
    ended: float | None = None


def read_runs(path: Path) -> dict[int, list[Run]]:
    """The handler runs of each job, in the order they started."""
    runs: dict[int, list[Run]] = defaultdict(list)
    open_runs: dict[tuple[int, int], Run] = {}
    for line in path.read_text().splitlines():
        what, job, attempt, pid, at = line.split()
        if what == "start":
            run = Run(int(job), int(attempt), int(pid), float(at))
            runs[run.job].append(run)
            open_runs[(run.job, run.pid)] = run
        elif (run_ := open_runs.pop((int(job), int(pid)), None)) is not None:
            run_.ended = float(at)
    return runs


def jobs_state(conn: Conn) -> dict[int, tuple[str, int]]:
    """Every job: its status and attempts."""
    rows = conn.execute("SELECT id, status, attempts FROM jobq.jobs").fetchall()
    return {int(r[0]): (str(r[1]), int(r[2])) for r in rows}


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


# --- the clusters and the failover --------------------------------------------------

@pytest.fixture(scope="module")
def spare() -> Iterator[list[Cluster]]:
    """One cluster built ahead for the module (building one takes seconds): the
    docs test reads it, the first failover test takes it (``a_cluster``)."""
    with cluster() as both:
        yield [both]


@contextlib.contextmanager
def a_cluster(spare: list[Cluster]) -> Iterator[Cluster]:
    """The spare cluster if no test failed it over yet, else a new one."""
    if spare:
        yield spare.pop()  # the fixture stops it at the end of the module
    else:
        with cluster() as both:
            yield both



def fence(both: Cluster) -> None:
    """Make the primary refuse writes (``default_transaction_read_only``), as an
    HA manager fences an old primary: its sessions get SQLSTATE 25006 ("cannot
    execute ... in a read-only transaction"), new ones are refused by
    ``target_session_attrs=read-write``."""
    with psycopg.connect(both.primary_dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        conn.execute("SELECT pg_reload_conf()")


def replayed(both: Cluster) -> bool:
    with psycopg.connect(both.standby_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()").fetchone()
    return row == (True,)


def fail_over(both: Cluster, how: str, while_fenced: Callable[[], object] = lambda: None
              ) -> tuple[dict[int, tuple[str, int]], float]:
    """Move the cluster to the standby, ``how``:

    - ``crash``: the primary dies (``-m immediate``) and the standby is promoted;
    - ``fenced-crash``: the primary refuses writes for FENCED seconds first (25006), then dies;
    - ``switchover``: fenced, then stopped cleanly (``-m fast``: its sessions get 57P01);
    - ``long-outage``: a crash, and the promotion only once the leases held
      at the failover have run out: the workers reap them (every 2 s) and
      run those jobs again, while their holders' late acks are refused.

    ``while_fenced`` runs while the primary refuses writes. Returns every
    job's (status, attempts) at the failover, read on the standby before its
    promotion (exactly what was committed), and the time the promotion began."""
    if how != "crash":
        fence(both)
        fenced = time.monotonic()
        while_fenced()
        time.sleep(max(0.0, FENCED - (time.monotonic() - fenced)))
    both.stopped_at = time.time()  # an enqueue that returned before is committed: it must survive
    both.primary.stop("fast" if how == "switchover" else "immediate")
    if how == "long-outage":
        time.sleep(LEASE + 1.0)
    wait_until(lambda: replayed(both), "the standby replaying all it received", timeout=30)
    with psycopg.connect(both.standby_dsn, autocommit=True) as standby:
        at_failover = jobs_state(standby)
    promoting = time.time()  # nothing commits from the primary's end to here
    both.standby.promote()
    both.promoted_at = time.time()
    return at_failover, promoting


# --- the docs' read-replica dashboard, on a real standby ----------------------------

STANDBY_BLOCKS = [b for path in documents() for b in blocks(path) if b.marker == "on-standby"]


def test_the_docs_read_replica_blocks_run_on_a_streaming_standby(spare: list[Cluster],
                                                                 tmp_path: Path) -> None:
    """docs/scaling.md's dashboard on a read replica, run as written: the
    database ``app`` and the login role ``viewer`` (in jobq_viewer) are made
    on the primary, a job enqueued there, and the block runs with
    ``$REPLICA`` naming the standby (its socket directory)."""
    assert [b.path.name for b in STANDBY_BLOCKS] == ["scaling.md"], STANDBY_BLOCKS
    tmp_path.chmod(0o777)
    # the spare, left as it is for a failover test (it only adds a database and a role)
    with contextlib.nullcontext(spare[0]) if spare else cluster() as both:
        with psycopg.connect(both.primary_dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE app")
        app = both.primary.dsn.replace(f"dbname={both.primary.database}", "dbname=app")
        with psycopg.connect(app, autocommit=True) as conn:
            conn.execute(install_script().encode())
            conn.execute("CREATE ROLE viewer LOGIN IN ROLE jobq_viewer")
            job = pyqueue.enqueue(conn, "emails", {"to": "a@example.com"})
        standby_app = both.standby.dsn.replace(f"dbname={both.standby.database}", "dbname=app")
        # The commits waited for the standby to receive them (synchronous_commit on),
        # not to apply them: wait for the replay, then the job must be there.
        wait_until(lambda: replayed(both), "the standby replaying all it received", timeout=30)
        with psycopg.connect(standby_app, autocommit=True) as standby:
            assert standby.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
            assert standby.execute("SELECT count(*) FROM jobq.jobs WHERE id = %s", (job,)).fetchone() == (1,)
        for block in STANDBY_BLOCKS:
            assert block.kind == "sh", block.where
            script = tmp_path / f"block_{block.line}.sh"
            script.write_text(block.text)
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("PG")},
                   "REPLICA": urllib.parse.quote(both.standby.host, safe=""),
                   "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                   "PYTHONDONTWRITEBYTECODE": "1"}
            done = subprocess.run(["bash", "-euo", "pipefail", str(script)], cwd=ROOT, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                                  check=False)
            assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stdout}{done.stderr}"
            assert "<h1>Queues</h1>" in done.stdout and "jobq_up 1.0" in done.stdout, done.stdout
            print(f"--- {block.where}\n{done.stdout}")


# --- the test ------------------------------------------------------------------

# make test runs the fenced crash (it covers the read-only errors and the crash);
# make chaos (scale > 1) every way a primary goes: collected only there, not skipped here.
FAILOVERS = ["fenced-crash"] + (["crash", "switchover", "long-outage"] if scale() > 1 else [])


@pytest.mark.parametrize("how", FAILOVERS)
def test_a_worker_fleet_survives_a_failover(spare: list[Cluster], tmp_path: Path, how: str) -> None:
    tmp_path.chmod(0o777)
    runs_file = tmp_path / "runs.log"
    backlog = scaled(60)  # jobs per queue waiting when the workers start
    before, after = 0.3 * scale(), 1.5 * scale()  # seconds of draining around the failover
    t0 = time.monotonic()
    with a_cluster(spare) as both:
        phases = {"cluster": round(time.monotonic() - t0, 1)}  # seconds since the start, to report
        fleet: list[Process] = []
        producer = Producer(both, [], interval=0.01)
        try:
            fleet = start_fleet(both.dsn, runs_file, tmp_path)  # starting while the dashboard does
            producer.queues = queues = [p.queue for p in fleet]
            with dashboard(both.dsn, tmp_path) as board:
                board_url, board_log, client = f"http://127.0.0.1:{board.port}", board.log, board.client()
                assert http_status(board_url + "/") == 200
                with both.connect() as conn:
                    conn.execute("CREATE TABLE ledger (job_id bigint PRIMARY KEY)")  # the tx-worker's writes
                    for queue in queues:
                        keep_history(conn, queue)  # completed jobs stay visible in jobq.jobs
                        pyqueue.enqueue_many(conn, queue, [{"sleep": JOB_SLEEP}] * backlog)
                    backlog_ids = set(jobs_state(conn))
                producer.thread.start()
                with both.connect() as conn:  # mid-drain: every worker has begun, none is done
                    wait_until(lambda: conn.execute(
                        "SELECT count(DISTINCT queue) FROM jobq.jobs WHERE status = 'completed'")
                        .fetchone() == (len(queues),), "every worker completing jobs")
                phases["mid_drain"] = round(time.monotonic() - t0, 1)
                time.sleep(before)

                refused: list[int] = []  # the dashboard's answers to a write while the primary refuses them

                def retry_a_job() -> None:
                    refused.append(client.post("/jobs/1/retry", [], token_from="/jobs/1").status)

                at_failover, promoting = fail_over(both, how, retry_a_job)
                phases["promoted"] = round(time.monotonic() - t0, 1)
                time.sleep(after)
                producer.stop.set()
                producer.thread.join(timeout=30)
                with both.connect() as conn:
                    wait_until(lambda: conn.execute("SELECT count(*) FROM jobq.jobs "
                                                    "WHERE status <> 'completed'").fetchone() == (0,),
                               "every job completed", timeout=60 * scale())
                    phases["drained"] = round(time.monotonic() - t0, 1)
                    # each worker re-LISTENed: it polls once a minute, a NOTIFY brings it a new job at once
                    late = {pyqueue.enqueue(conn, queue, {"late": True}) for queue in queues}
                    wait_until(lambda: conn.execute("SELECT count(*) FROM jobq.jobs WHERE id = ANY(%s) "
                                                    "AND status = 'completed'", (list(late),))
                               .fetchone() == (len(late),),
                               "the jobs enqueued after the drain (NOTIFY)", timeout=20)
                    phases["notified"] = round(time.monotonic() - t0, 1)
                    final = jobs_state(conn)
                    tx_queue = next(p.queue for p in fleet if p.mode == "tx-worker")
                    tx_jobs = {int(r[0]) for r in conn.execute("SELECT id FROM jobq.jobs WHERE queue = %s",
                                                               (tx_queue,)).fetchall()}
                    ledger = [int(r[0]) for r in conn.execute("SELECT job_id FROM ledger").fetchall()]
                    failures = conn.execute("SELECT id, last_error FROM jobq.jobs "
                                            "WHERE last_error IS NOT NULL").fetchall()
                    first_completion = conn.execute(
                        "SELECT extract(epoch FROM min(finished_at)) FROM jobq.jobs WHERE finished_at > "
                        "to_timestamp(%s)", (promoting,)).fetchone()
                    listening = conn.execute("SELECT count(*) FROM pg_stat_activity "
                                             "WHERE application_name = 'pyqueue-listen'").fetchone()
                # the dashboard serves again, on the new primary, without a restart
                wait_until(lambda: http_status(board_url + "/") == 200, "the dashboard serving again",
                           timeout=30)
                newest = max(final)
                assert http_status(f"{board_url}/jobs/{newest}") == 200
                assert board.process.poll() is None, board_log.read_text()
                # a write the fenced primary refused: "database unavailable" (503), not an internal error
                assert refused == ([] if how == "crash" else [503]), (refused, board_log.read_text())
            phases["dashboard"] = round(time.monotonic() - t0, 1)
            alive = [p for p in fleet if p.proc.poll() is None]
            assert len(alive) == len(fleet), "a worker died:\n" + "\n".join(
                p.output() for p in fleet if p.proc.poll() is not None)
        finally:
            producer.stop.set()
            for p in fleet:
                if p.proc.poll() is None:
                    p.proc.send_signal(signal.SIGTERM)
            for p in fleet:
                try:
                    p.proc.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait()
    phases["stopped"] = round(time.monotonic() - t0, 1)
    for p in fleet:
        assert p.proc.returncode == 0, f"{p.mode} exited {p.proc.returncode}:\n{p.output()}"
        assert "worker exits normally" in p.output(), p.output()
        if how != "crash":  # every loop met the read-only primary, and took it for a lost connection
            assert "takes no writes now" in p.output(), p.output()

    stopped, promoted = both.stopped_at, both.promoted_at
    assert stopped is not None and promoted is not None
    runs = read_runs(runs_file)
    committed_before = {i for i, at in producer.committed.items() if at < stopped} | backlog_ids
    running_at = {i for i, (status, _) in at_failover.items() if status == "running"}
    completed_at = {i for i, (status, _) in at_failover.items() if status == "completed"}

    # committed means survives
    lost = committed_before - set(at_failover)
    assert not lost, f"jobs whose enqueue committed before the failover are gone: {sorted(lost)[:20]}"
    assert completed_at and set(at_failover) - completed_at, "the failover did not come mid-drain"
    # every job ends completed, exactly once
    assert {s for s, _ in final.values()} == {"completed"}, final
    never_ran = [i for i in final if not runs.get(i)]
    assert not never_ran, f"completed without a run: {never_ran[:20]}"
    # a job completed at the failover never runs again: its one run began before the primary ended
    # (an in-transaction job may have had runs whose batch rolled back before the one that committed)
    again = [i for i in completed_at
             if (len(runs[i]) > 1 and i not in tx_jobs) or any(r.started > stopped for r in runs[i])]
    assert not again, f"jobs completed before the failover ran again: {again}"
    # in-transaction jobs: their writes committed exactly once (a batch the failover cut rolled back)
    assert sorted(ledger) == sorted(tx_jobs), "the tx-worker's ledger does not hold each of its jobs once"
    assert all(final[i][1] == 1 for i in tx_jobs), "an in-transaction job spent more than one attempt"
    # only a leased job running at the failover may run twice, and none starts twice after it
    twice = {i for i, rs in runs.items() if len(rs) > 1} - tx_jobs
    assert twice <= running_at, f"jobs run twice that were not running at the failover: {twice - running_at}"
    assert all(sum(r.started > stopped for r in runs[i]) <= 1 for i in set(runs) - tx_jobs), "started twice"
    # no attempt burned: no failure, and one more attempt only for a job running at the failover
    assert not failures, f"failures were recorded: {failures[:5]}"
    extra = {i: (at_failover.get(i, ("", 1))[1], a) for i, (_, a) in final.items()
             if a != max(at_failover.get(i, ("", 1))[1], 1)}
    assert set(extra) <= running_at, f"attempts changed for jobs not running at the failover: {extra}"
    assert all(a - before_ <= 1 for before_, a in extra.values()), extra
    # a workflow's child starts after its parent ended
    early = [(p, c) for p, c in producer.chains
             if p in runs and c in runs and min(r.started for r in runs[c])
             < max(r.ended or r.started for r in runs[p])]
    assert producer.chains and not early, f"children started before their parent ended: {early}"
    # every worker carried on, and LISTENs again
    after_pids = {r.pid for rs in runs.values() for r in rs if r.started > promoted}
    assert {p.proc.pid for p in fleet} <= after_pids, "a worker did no work after the failover"
    assert listening == (len(fleet),), listening

    assert first_completion is not None and first_completion[0] is not None
    figures = {
        "workers": len(fleet),
        "jobs": len(final),
        "committed_before_failover": len(committed_before),
        "completed_at_failover": len(completed_at),
        "running_at_failover": len(running_at),
        "run_twice": len(twice),
        "tx_runs_rolled_back": sum(len(runs[i]) - 1 for i in tx_jobs),
        "chains": len(producer.chains),
        "producer_errors": len(producer.errors),
        "promote_to_first_completion_s": round(float(first_completion[0]) - promoting, 2),
        "promoted_to_first_completion_s": round(float(first_completion[0]) - promoted, 2),
        "primary_death_to_first_completion_s": round(float(first_completion[0]) - stopped, 2),
        "phases_s": phases,
    }
    report(f"failover-{how}", figures, tmp_path)

