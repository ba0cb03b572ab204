"""Workflows (jobq 0.6) under real concurrency (issue 15, "Tests"):

- a 1,000-job diamond graph drained by 8 ``pyqueue.Worker`` processes with
  seeded random failures, a few dead jobs and one worker SIGKILLed mid-run:
  every job runs after all its parents finished, none runs again after its
  completion, cascades record their root dead ancestor, ``'run'`` children of
  dead parents run, and ``jobq.retry`` of the dead jobs brings their
  cancelled descendants back for a second drain that finishes everything;
- a batch of 10,000 members (100,000 under ``make chaos``) with a callback
  drained by 16 concurrent consumers (some members dead, some cancelled):
  exactly one callback, with the right counts, run once;
- races: children enqueued in open transactions while their parents are
  being completed or failed into dead: no child stays waiting, each ends as
  its parents' outcomes say, and no transaction of either side is a
  deadlock victim (since 0.9.0 the enqueue locks nothing before its commit).

Dependencies are made through SQL (``jobq.enqueue(..., depends_on =>)``,
``jobq.enqueue_callback``), not through pyqueue's workflow API. Figures are
printed with ``pytest -s`` (seeds replay with JOBQ_CHAOS_SEED).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.chaos_fleet import ProgramProcess
from tests.chaos_support import elapsed, report, rng, scaled
from tests.worker_support import InThread, scalar, wait_until
from tests.workflow_programs import RUNS_DDL

Conn = psycopg.Connection[Any]

# --- the diamond graph ---------------------------------------------------------------

GRAPH_QUEUE = "wf"
GRAPH_JOBS = scaled(1000)  # times JOBQ_CHAOS_SCALE (make chaos)
GRAPH_LAYERS = 10
GRAPH_WORKERS = 8  # worker processes
GRAPH_OPTIONS = ("--queue", GRAPH_QUEUE, "--concurrency", "2", "--batch-size", "4",
                 "--lease", "2", "--reap-interval", "1", "--poll-interval", "1")
GRAPH_SETUP = ("SELECT jobq.configure_queue(%s, retention => interval '1 day', "
               "backoff_base => interval '0.1 s', backoff_cap => interval '0.3 s')")
RUN_CHILD_SHARE = 0.3  # children enqueued with on_parent_failure 'run'
RETRIED_SHARE = 0.12  # jobs that fail once, then succeed (max_attempts 3)
DOOMED_SHARE = 0.03  # jobs that fail every attempt (max_attempts 1 or 2): dead
KILL_AFTER = 0.3  # share of the jobs finished when one worker is SIGKILLed
DRAIN_TIMEOUT = 240.0  # seconds: generous, the machine is shared
FINISHED = ("completed", "dead", "cancelled")
ENQUEUE_TRIES = 5  # an enqueue the server aborted as a deadlock victim is tried again, this many times in all


@dataclass
class Node:
    """One job of the graph as the test enqueued it."""

    id: int
    parents: list[int]
    policy: str  # on_parent_failure
    fail: int  # attempts that fail
    max_attempts: int


@dataclass
class JobState:
    status: str
    finished_at: Any
    cancelled_by: int | None
    last_error: str | None


def plan_node(rand: random.Random, layer: int) -> tuple[int, int, float]:
    """(attempts that fail, max_attempts, seconds of work) of one job."""
    roll = rand.random()
    if roll < DOOMED_SHARE and layer < GRAPH_LAYERS - 1:
        max_attempts = rand.choice((1, 2))
        return max_attempts, max_attempts, 0.0
    if roll < DOOMED_SHARE + RETRIED_SHARE:
        return 1, 3, rand.uniform(0.0, 0.04)
    return 0, 3, rand.uniform(0.0, 0.04)


def enqueue_retrying(conn: Conn, deadlocks: Counter[str], query: str, params: tuple[Any, ...]) -> int:
    """One autocommit enqueue, retried when the server broke a deadlock with
    the workers finishing its parents (counted in ``deadlocks``, reported)."""
    for _ in range(ENQUEUE_TRIES - 1):
        try:
            return int(scalar(conn, query, params))
        except psycopg.errors.DeadlockDetected:
            deadlocks["enqueue"] += 1
    return int(scalar(conn, query, params))


def enqueue_graph(conn: Conn, rand: random.Random, deadlocks: Counter[str]) -> dict[int, Node]:
    """Enqueue the diamond layer by layer (workers are already draining): each
    job after the first layer depends on 1..3 jobs of the layers before,
    mostly the one just before."""
    nodes: dict[int, Node] = {}
    layers: list[list[int]] = []
    per_layer = GRAPH_JOBS // GRAPH_LAYERS
    for layer in range(GRAPH_LAYERS):
        ids: list[int] = []
        for _ in range(per_layer):
            parents: list[int] = []
            if layer:
                pool = layers[-1] if rand.random() < 0.7 or layer == 1 else [i for ls in layers for i in ls]
                parents = sorted(rand.sample(pool, rand.randint(1, min(3, len(pool)))))
            policy = "run" if parents and rand.random() < RUN_CHILD_SHARE else "cancel"
            fail, max_attempts, work = plan_node(rand, layer)
            payload = Jsonb({"fail": fail, "sleep": round(work, 3)})
            job_id = enqueue_retrying(conn, deadlocks, "SELECT jobq.enqueue(%s, %s, max_attempts => %s, "
                                      "depends_on => %s::bigint[], on_parent_failure => %s)",
                                      (GRAPH_QUEUE, payload, max_attempts, parents or None, policy))
            nodes[int(job_id)] = Node(int(job_id), parents, policy, fail, max_attempts)
            ids.append(int(job_id))
        layers.append(ids)
    return nodes


def job_states(conn: Conn) -> dict[int, JobState]:
    rows = conn.execute("SELECT id, status, finished_at, cancelled_by, last_error FROM jobq.jobs "
                        "WHERE queue = %s", (GRAPH_QUEUE,)).fetchall()
    return {int(r[0]): JobState(str(r[1]), r[2], r[3], r[4]) for r in rows}


def runs_by_job(conn: Conn, after: int = 0) -> dict[int, list[tuple[int, Any, Any]]]:
    """Handler runs (pid, started, finished) of each job, those with wf_runs.id > ``after``."""
    runs: dict[int, list[tuple[int, Any, Any]]] = defaultdict(list)
    for job_id, pid, started, finished in conn.execute(
            "SELECT job_id, pid, started, finished FROM wf_runs WHERE id > %s ORDER BY id", (after,)):
        runs[int(job_id)].append((int(pid), started, finished))
    return runs


def live(conn: Conn, queue: str) -> int:
    """How many jobs of ``queue`` are live (waiting, ready, scheduled, running)."""
    return int(scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = %s", (queue,)))


def wait_drained(conn: Conn, what: str) -> None:
    """Until the graph's queue has no live job; on timeout, say what is left."""
    try:
        wait_until(lambda: live(conn, GRAPH_QUEUE) == 0, what, timeout=DRAIN_TIMEOUT)
    except AssertionError:
        left = conn.execute("SELECT status, count(*) FROM jobq.jobs WHERE queue = %s AND status NOT IN "
                            "('completed', 'dead', 'cancelled') GROUP BY 1", (GRAPH_QUEUE,)).fetchall()
        raise AssertionError(f"{what}: still live after {DRAIN_TIMEOUT:.0f} s: {left}") from None


def check_order(nodes: dict[int, Node], states: dict[int, JobState],
                runs: dict[int, list[tuple[int, Any, Any]]],
                before: dict[int, JobState] | None = None) -> int:
    """Every job that ran started after all its parents finished; how many jobs
    checked. ``before``: the states after the first drain, for the message."""
    for job_id, job_runs in runs.items():
        first = min(started for _, started, _ in job_runs)
        for parent in nodes[job_id].parents:
            done = states[parent]
            assert done.status in FINISHED, f"job {job_id} ran while its parent {parent} was {done.status}"
            assert done.finished_at < first, (
                f"job {job_id} started at {first}, before its parent {parent} finished at "
                f"{done.finished_at}; "
                f"the job: {nodes[job_id]}, after the first drain "
                f"{ {j: before[j] for j in [job_id, *nodes[job_id].parents]} if before else ''}")
    return len(runs)


def check_no_rerun(states: dict[int, JobState], runs: dict[int, list[tuple[int, Any, Any]]],
                   killed: set[int]) -> None:
    """No run starts after the job's completion; a second successful run only
    when a killed worker's run finished without its acknowledgement."""
    for job_id, job_runs in runs.items():
        state = states[job_id]
        if state.status == "completed":
            late = [started for _, started, _ in job_runs if started > state.finished_at]
            assert not late, f"job {job_id} completed at {state.finished_at} and ran again at {late}"
        succeeded = [pid for pid, _, finished in job_runs if finished is not None and pid not in killed]
        assert len(succeeded) <= 1, f"job {job_id} ran to the end {len(succeeded)} times in live workers"


def check_outcomes(nodes: dict[int, Node], states: dict[int, JobState],
                   runs: dict[int, list[tuple[int, Any, Any]]]) -> Counter[str]:
    """Each job's final state after the first drain follows from its parents':
    'cancel' children of a failed parent are cancelled with the root dead
    ancestor recorded; everything else ran and ended completed or dead."""
    seen: Counter[str] = Counter()
    for job_id, node in nodes.items():
        state = states[job_id]
        failed = [p for p in node.parents if states[p].status in ("dead", "cancelled")]
        if node.policy == "cancel" and failed:
            assert state.status == "cancelled", f"job {job_id}: failed parents {failed}, {state.status}"
            assert job_id not in runs, f"cancelled job {job_id} ran"
            roots = {p if states[p].status == "dead" else states[p].cancelled_by for p in failed}
            assert state.cancelled_by in roots, (
                f"job {job_id}: cancelled_by {state.cancelled_by}, expected one of {roots}")
            assert states[int(str(state.cancelled_by))].status == "dead"
            seen["cancelled"] += 1
        else:
            assert state.status in ("completed", "dead"), f"job {job_id} ({node.policy}) is {state.status}"
            # A job the killed worker had claimed but not started yet may die of its expired lease.
            reaped = state.status == "dead" and "lease" in (state.last_error or "")
            assert job_id in runs or reaped, f"job {job_id} ({node.policy}) never ran"
            assert state.cancelled_by is None
            seen[state.status] += 1
            if failed:
                seen["run_after_failed_parent"] += 1
    return seen


def test_diamond_graph_with_failures_and_a_killed_worker(dsn: str, conn: Conn, tmp_path: Path) -> None:
    rand, seed = rng("diamond_graph")
    print(f"\ndiamond graph: seed {seed}", flush=True)
    conn.execute(RUNS_DDL)
    conn.execute(GRAPH_SETUP, (GRAPH_QUEUE,))
    logs = tmp_path / "workers"
    logs.mkdir()
    workers = [ProgramProcess("tests.workflow_programs", dsn, logs, *GRAPH_OPTIONS)
               for _ in range(GRAPH_WORKERS)]
    killed: set[int] = set()
    deadlocks: Counter[str] = Counter()
    started = time.monotonic()
    try:
        nodes = enqueue_graph(conn, rand, deadlocks)
        wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = %s AND status IN "
                                        "('completed', 'dead', 'cancelled')", (GRAPH_QUEUE,))
                   >= GRAPH_JOBS * KILL_AFTER, "a third of the graph finished", timeout=DRAIN_TIMEOUT)
        holding = [w for w in workers if scalar(  # a worker with a handler running now
            conn, "SELECT count(*) FROM wf_runs WHERE pid = %s AND finished IS NULL "
                  "AND started > clock_timestamp() - interval '0.2 s'", (w.pid,))]
        victim = rand.choice(holding or workers)
        victim.kill()
        killed.add(victim.pid)
        wait_drained(conn, "the first drain")
        first_drain = elapsed(started)

        states = job_states(conn)
        runs = runs_by_job(conn)
        assert set(states) == set(nodes)
        assert not [j for j, s in states.items() if s.status not in FINISHED]
        checked = check_order(nodes, states, runs)
        check_no_rerun(states, runs, killed)
        seen = check_outcomes(nodes, states, runs)
        assert seen["dead"] > 0 and seen["cancelled"] > 0 and seen["run_after_failed_parent"] > 0, seen
        retried_ok = sum(1 for j, s in states.items() if s.status == "completed" and len(runs[j]) > 1)
        assert retried_ok > 0

        # Retry every dead job: the descendants their deaths cancelled wait again.
        dead = sorted(j for j, s in states.items() if s.status == "dead")
        cancelled = sorted(j for j, s in states.items() if s.status == "cancelled")
        conn.execute("UPDATE wf_phase SET healed = true")
        boundary = int(scalar(conn, "SELECT coalesce(max(id), 0) FROM wf_runs"))
        with conn.transaction():  # the workers see every retry at once, and only after this check
            for job_id in dead:
                assert scalar(conn, "SELECT jobq.retry(%s)", (job_id,)) is True
            after_retry = job_states(conn)
        # A retried job with parents goes through its gate again: it waits for
        # those that are live again (retried, or restored), else it is ready.
        again = set(dead) | set(cancelled)
        expected = {j: "waiting" if again.intersection(nodes[j].parents) else "ready" for j in dead}
        assert {j: after_retry[j].status for j in dead} == expected
        stuck = {j: after_retry[j].status for j in cancelled if after_retry[j].status != "waiting"}
        assert not stuck, f"cancelled descendants not waiting again after the retries: {stuck}"
        assert all(after_retry[j].cancelled_by is None for j in cancelled)
        restored = len(cancelled)

        wait_drained(conn, "the second drain")
        final = job_states(conn)
        assert Counter(s.status for s in final.values()) == Counter({"completed": len(nodes)})
        second_runs = runs_by_job(conn, boundary)
        assert set(second_runs) == set(dead) | set(cancelled), "the second drain ran jobs not retried"
        # Every job of the second drain, retried or restored, ran after its parents.
        check_order(nodes, final, second_runs, states)
        check_no_rerun(final, runs_by_job(conn), killed)
    finally:
        for worker in workers:
            worker.kill()
    report("diamond_graph", {
        "seed": seed, "jobs": len(nodes), "workers": GRAPH_WORKERS, "killed_pid": sorted(killed),
        "first_drain_s": first_drain, "ran_in_order_checked": checked, "dead": len(dead),
        "cancelled_by_cascade": len(cancelled), "waiting_after_retry": restored,
        "run_children_of_failed_parents": seen["run_after_failed_parent"],
        "completed_after_a_failed_attempt": retried_ok, "enqueue_deadlocks_retried": deadlocks["enqueue"],
        "total_s": elapsed(started),
    }, tmp_path)


# --- the batch of members ------------------------------------------------------------

BATCH_QUEUE = "wf-members"
CALLBACK_QUEUE = "wf-callback"
BATCH_MEMBERS = scaled(10_000)  # 100,000 under make chaos (JOBQ_CHAOS_SCALE=10)
BATCH_CONSUMERS = 16
BATCH_CLAIM = 100  # jobs per claim
MEMBER_FAILS_EVERY = 50  # members whose number is a multiple of this fail (max_attempts 1: dead)
MEMBER_CANCEL_EVERY = 97  # members number 1 mod this are cancelled during the drain
COMPLETE_MANY = "SELECT jobq.complete_many(%s::bigint[], %s::uuid[])"
FAIL_ONE = "SELECT jobq.fail(%s, 'planned failure', %s::uuid)"


@dataclass
class Consumed:
    """What the consumers did, shared between their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    completed: int = 0
    failed: int = 0
    lost: int = 0  # claimed, then cancelled under the consumer (complete/fail returned nothing)

    def add(self, completed: int, failed: int, lost: int) -> None:
        with self.lock:
            self.completed += completed
            self.failed += failed
            self.lost += lost


def consume(dsn: str, queue: str, done: Consumed, stop: threading.Event) -> None:
    """Claim batches; fail the members whose number is a multiple of
    MEMBER_FAILS_EVERY, complete the others in one call."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            rows = conn.execute("SELECT id, lease_token, payload FROM jobq.claim(%s, %s)",
                                (queue, BATCH_CLAIM)).fetchall()
            if not rows:
                stop.wait(0.02)
                continue
            good = [(r[0], r[1]) for r in rows if r[2]["i"] % MEMBER_FAILS_EVERY]
            bad = [(r[0], r[1]) for r in rows if not r[2]["i"] % MEMBER_FAILS_EVERY]
            completed = 0
            if good:
                completed = int(scalar(conn, COMPLETE_MANY, ([g[0] for g in good], [g[1] for g in good])))
            failed = sum(1 for job_id, token in bad if scalar(conn, FAIL_ONE, (job_id, token)))
            done.add(completed, failed, len(rows) - completed - failed)


def test_batch_of_members_has_one_callback(dsn: str, conn: Conn, tmp_path: Path) -> None:
    for queue in (BATCH_QUEUE, CALLBACK_QUEUE):
        conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (queue,))
    started = time.monotonic()
    members = [int(r[0]) for r in conn.execute(
        "SELECT jobq.enqueue_many(%s, %s::jsonb[], max_attempts => 1)",
        (BATCH_QUEUE, [Jsonb({"i": i}) for i in range(BATCH_MEMBERS)])).fetchall()]
    enqueue_s = elapsed(started)
    mark = time.monotonic()
    callback = int(scalar(conn, "SELECT jobq.enqueue_callback(%s, %s, %s::bigint[])",
                          (CALLBACK_QUEUE, Jsonb({"album": 7, "batch": "overridden"}), members)))
    callback_s = elapsed(mark)
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (callback,)) == "waiting"
    # Highest ids first: the consumers claim from the lowest, so the cancels
    # race them in the middle and still find members waiting at any scale.
    to_cancel = members[1::MEMBER_CANCEL_EVERY][::-1]

    done = Consumed()
    stop = threading.Event()
    mark = time.monotonic()
    consumers = [InThread(lambda: consume(dsn, BATCH_QUEUE, done, stop)) for _ in range(BATCH_CONSUMERS)]
    cancelled_now = 0
    try:
        with psycopg.connect(dsn, autocommit=True) as canceller:  # cancels race the consumers
            for job_id in to_cancel:
                cancelled_now += bool(scalar(canceller, "SELECT jobq.cancel(%s)", (job_id,)))
        wait_until(lambda: live(conn, BATCH_QUEUE) == 0, "the batch drained", timeout=DRAIN_TIMEOUT)
    finally:
        stop.set()
        for consumer in consumers:
            consumer.join()
    drain_s = elapsed(mark)

    outcome = Counter(str(r[0]) for r in conn.execute(
        "SELECT status FROM jobq.jobs WHERE queue = %s", (BATCH_QUEUE,)).fetchall())
    expected = {"completed": outcome["completed"], "dead": outcome["dead"], "cancelled": outcome["cancelled"],
                "members": BATCH_MEMBERS}
    assert sum(outcome.values()) == BATCH_MEMBERS
    assert outcome["dead"] == done.failed > 0 and outcome["completed"] == done.completed
    assert outcome["cancelled"] == cancelled_now > 0
    callbacks = conn.execute("SELECT id, status, payload FROM jobq.jobs WHERE queue = %s",
                             (CALLBACK_QUEUE,)).fetchall()
    assert [(r[0], r[1]) for r in callbacks] == [(callback, "ready")]
    assert callbacks[0][2] == {"album": 7, "batch": expected}

    # It runs once: claimed and completed, nothing else to claim.
    claimed = conn.execute("SELECT id, lease_token FROM jobq.claim(%s, 10)", (CALLBACK_QUEUE,)).fetchall()
    assert [r[0] for r in claimed] == [callback]
    assert scalar(conn, "SELECT jobq.complete(%s, %s::uuid)", (claimed[0][0], claimed[0][1])) is True
    # A dead member retried and completed later does not bring the callback back.
    dead_member = int(scalar(conn, "SELECT min(id) FROM jobq.jobs WHERE queue = %s AND status = 'dead'",
                             (BATCH_QUEUE,)))
    assert scalar(conn, "SELECT jobq.retry(%s)", (dead_member,)) is True
    again = conn.execute("SELECT id, lease_token FROM jobq.claim(%s, 1)", (BATCH_QUEUE,)).fetchall()
    assert [r[0] for r in again] == [dead_member]
    assert scalar(conn, "SELECT jobq.complete(%s, %s::uuid)", (again[0][0], again[0][1])) is True
    assert conn.execute("SELECT jobq.claim(%s, 10)", (CALLBACK_QUEUE,)).fetchall() == []
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = %s", (CALLBACK_QUEUE,)) == 1
    assert scalar(conn, "SELECT jobq.status(%s)", (callback,)) == "completed"
    report("batch_callback", {
        "members": BATCH_MEMBERS, "consumers": BATCH_CONSUMERS, **expected, "lost_to_cancel": done.lost,
        "enqueue_many_s": enqueue_s, "enqueue_callback_s": callback_s, "drain_s": drain_s,
        "total_s": elapsed(started),
    }, tmp_path)


# --- races: children enqueued while their parents finish ------------------------------

PARENT_QUEUE = "wf-parents"
CHILD_QUEUE = "wf-children"
RACE_PARENTS = scaled(600)
RACE_CHILDREN = scaled(4000)  # the producers stop after about this many children
RACE_CONSUMERS = 4
RACE_PRODUCERS = 8
PARENT_DIES = 0.25  # parents that fail into dead (max_attempts 1)
RETRYABLE = ("40P01", "40001")  # deadlock, serialization failure: the client retries the transaction


@dataclass
class RaceLog:
    """Shared between the race threads: parents in hand, children made, retries."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    in_hand: list[int] = field(default_factory=list)
    children: dict[int, tuple[list[int], str]] = field(default_factory=dict)
    retried: Counter[str] = field(default_factory=Counter)
    first_retry: str = ""  # the first retried error's detail (which locks), for the report

    def retry(self, what: str, error: psycopg.Error) -> None:
        with self.lock:
            self.retried[f"{what} {error.sqlstate}"] += 1
            if not self.first_retry:
                self.first_retry = f"{what}: {error.diag.message_detail}"


def finish_parents(dsn: str, log: RaceLog, seed: int, stop: threading.Event) -> None:
    """Claim parents, publish them as in hand, hold them a moment, then complete
    or fail them (dying parents fail into dead)."""
    rand = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            rows = conn.execute("SELECT id, lease_token, payload FROM jobq.claim(%s, 3)",
                                (PARENT_QUEUE,)).fetchall()
            if not rows:
                stop.wait(0.01)
                continue
            with log.lock:
                log.in_hand.extend(int(r[0]) for r in rows)
            time.sleep(rand.uniform(0, 0.01))
            for job_id, token, payload in rows:
                statement = FAIL_ONE if payload["dies"] else "SELECT jobq.complete(%s, %s::uuid)"
                while True:
                    try:
                        conn.execute(statement, (job_id, token))
                        break
                    except psycopg.Error as error:
                        if error.sqlstate not in RETRYABLE:
                            raise
                        log.retry("finish", error)
                with log.lock:
                    log.in_hand.remove(int(job_id))


def enqueue_children(dsn: str, log: RaceLog, every_parent: list[int], seed: int,
                     stop: threading.Event) -> None:
    """In open transactions, enqueue children of parents being finished right
    now (or of any parent), with a pause before the commit."""
    rand = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set() and len(log.children) < RACE_CHILDREN:
            with log.lock:
                pool = list(log.in_hand) if log.in_hand and rand.random() < 0.8 else []
            if not pool:
                pool = every_parent
            made: list[tuple[int, list[int], str]] = []
            try:
                with conn.transaction():
                    for _ in range(rand.randint(1, 3)):
                        parents = sorted(rand.sample(pool, rand.randint(1, min(3, len(pool)))))
                        policy = rand.choice(("cancel", "run"))
                        child = int(scalar(conn, "SELECT jobq.enqueue(%s, '{}', depends_on => %s::bigint[], "
                                                 "on_parent_failure => %s)", (CHILD_QUEUE, parents, policy)))
                        made.append((child, parents, policy))
                    time.sleep(rand.uniform(0, 0.005))
            except psycopg.Error as error:
                if error.sqlstate not in RETRYABLE:
                    raise
                log.retry("enqueue", error)
                continue
            with log.lock:
                for child, parents, policy in made:
                    log.children[child] = (parents, policy)


def test_children_enqueued_while_parents_finish(dsn: str, conn: Conn, tmp_path: Path) -> None:
    rand, seed = rng("dependency_races")
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (PARENT_QUEUE,))
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (CHILD_QUEUE,))
    payloads = [Jsonb({"dies": rand.random() < PARENT_DIES}) for _ in range(RACE_PARENTS)]
    parents = [int(r[0]) for r in conn.execute(
        "SELECT jobq.enqueue_many(%s, %s::jsonb[], max_attempts => 1)", (PARENT_QUEUE, payloads)).fetchall()]
    log = RaceLog()
    stop_producers, stop_consumers = threading.Event(), threading.Event()
    started = time.monotonic()
    producers = [InThread(partial(enqueue_children, dsn, log, parents, seed + k, stop_producers))
                 for k in range(RACE_PRODUCERS)]
    consumers = [InThread(partial(finish_parents, dsn, log, seed - k, stop_consumers))
                 for k in range(RACE_CONSUMERS)]
    try:
        wait_until(lambda: live(conn, PARENT_QUEUE) == 0, "every parent finished", timeout=DRAIN_TIMEOUT)
    finally:
        stop_producers.set()
        for thread in producers:
            thread.join()
        stop_consumers.set()
        for thread in consumers:
            thread.join()

    parent_status = {int(r[0]): str(r[1]) for r in conn.execute(
        "SELECT id, status FROM jobq.jobs WHERE queue = %s", (PARENT_QUEUE,)).fetchall()}
    assert set(parent_status.values()) == {"completed", "dead"}
    child_rows = {int(r[0]): (str(r[1]), r[2]) for r in conn.execute(
        "SELECT id, status, cancelled_by FROM jobq.jobs WHERE queue = %s", (CHILD_QUEUE,)).fetchall()}
    assert set(child_rows) == set(log.children), "children in jobq differ from the committed enqueues"
    seen: Counter[str] = Counter()
    for child, (its_parents, policy) in log.children.items():
        status, cancelled_by = child_rows[child]
        dead = [p for p in its_parents if parent_status[p] == "dead"]
        if policy == "cancel" and dead:
            assert status == "cancelled", f"child {child} of dead parents {dead} is {status}"
            assert cancelled_by in dead, f"child {child}: cancelled_by {cancelled_by}, dead parents {dead}"
            seen["cancelled"] += 1
        else:
            assert status == "ready", f"child {child} ({policy}), parents {its_parents} finished: {status}"
            seen["ready_" + policy + ("_after_dead" if dead else "")] += 1
    assert seen["cancelled"] and seen["ready_cancel"] and seen["ready_run_after_dead"], seen
    # Since 0.9.0 an enqueue locks nothing before its commit, and the commit
    # locks in id order: no completion and no enqueue was a deadlock victim.
    assert not log.retried, f"retried transactions: {dict(log.retried)} ({log.first_retry})"
    report("dependency_races", {
        "seed": seed, "parents": RACE_PARENTS,
        "dead_parents": sum(s == "dead" for s in parent_status.values()),
        "children": len(log.children), **dict(seen), "retried_transactions": dict(log.retried),
        "first_retry": log.first_retry,
        "seconds": elapsed(started),
    }, tmp_path)
