"""Fair queues (issue 28) under real concurrency and through pyqueue:

- starvation: one key with a big backlog (10,000 jobs, 100,000 under
  ``make chaos``) and 99 keys of 10 jobs, all enqueued before 4 real worker
  processes (batch 100) start: every small key's job finishes before 5,000
  jobs in all have (FIFO would run them after the whole backlog);
- weights: a key of weight 3 gets 3 times the turns of a key of weight 1
  (within 20 %), measured over a drain by real worker processes;
- per_key_concurrency holds under 8 racing claimers, sampled at every step
  (as the queue's concurrency limit is tested in test_coordination.py);
- pyqueue's enqueue(fair_key=), enqueue_many(fair_keys=) and
  configure_queue(fair=, fair_weights=, per_key_concurrency=), and their
  bad input: typed errors that change nothing;
- the dashboard's table of a fair queue's keys;
- leases: reap and the live counts find a fair claim's lease, in place or
  parked, however many jobs of other keys are ahead of it in the claim
  index; and a job enqueued without a key by a transaction that commits
  while configure_queue turns the queue fair is claimed.

Orders are read from the queue's history (the archive's started_at and
finished_at, database time), not from the handler.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue.defaults import LISTEN_APPLICATION_NAME
from tests.chaos_support import keep_history, report, scaled, snapshot
from tests.coord_support import Threads, max_overlap, scalar
from tests.dashboard_http_support import dashboard
from tests.worker_support import wait_until

Conn = psycopg.Connection[Any]
ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4
BATCH = 100
RACERS = 8


def start_workers(dsn: str, queue: str, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    """WORKERS real `pyqueue worker` processes on ``queue``, claiming BATCH at a time."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    procs = []
    for i in range(WORKERS):
        with (log_dir / f"worker-{i}.log").open("wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "pyqueue", "worker", "tests.fair_programs:noop", "--dsn", dsn,
                 "--queue", queue, "--batch-size", str(BATCH), "--concurrency", "4", "--app-dir", str(ROOT),
                 "--name", f"fair-{i}", "--no-schedules"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
    return procs


def drain(conn: Conn, dsn: str, queue: str, log_dir: Path, total: int) -> float:
    """Run the workers until ``queue`` has no live job; stop them (SIGTERM); the seconds it took."""
    began = time.monotonic()
    procs = start_workers(dsn, queue, log_dir)
    try:
        wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = %s", (queue,)) == 0,
                   f"the workers to drain {total} jobs", timeout=60 + total / 200)
        # A worker SIGTERMed before it runs is killed by it (exit -15): a
        # short drain may end before the last one started, so wait until
        # each listens (it handles the signal by then).
        listening = ("SELECT count(*) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND application_name = %s")
        wait_until(lambda: scalar(conn, listening, (LISTEN_APPLICATION_NAME,)) >= WORKERS,
                   f"all {WORKERS} workers to listen")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(timeout=60) == 0, (log_dir / "worker-0.log").read_text()[-2000:]
    return time.monotonic() - began


def enqueue_keys(conn: Conn, queue: str, key: str, count: int) -> None:
    conn.execute("SELECT count(*) FROM jobq.enqueue_many(%s, array_fill(jsonb_build_object('k', %s::text),"
                 " ARRAY[%s]), fair_keys => array_fill(%s::text, ARRAY[%s]))",
                 (queue, key, count, key, count))


# --- starvation and weights, with real worker processes ----------------------------------------

def test_a_big_backlog_does_not_starve_the_small_keys(conn: Conn, dsn: str, tmp_path: Path) -> None:
    big, small_keys, small_each, within = scaled(10_000), 99, 10, 5_000
    conn.execute("SELECT jobq.configure_queue('tenants', fair => true)")
    keep_history(conn, "tenants")
    enqueue_keys(conn, "tenants", "big", big)  # first: FIFO would run all of these before any other key
    for i in range(small_keys):
        enqueue_keys(conn, "tenants", f"small-{i:02d}", small_each)
    total = big + small_keys * small_each
    seconds = drain(conn, dsn, "tenants", tmp_path, total)

    done = scalar(conn, "SELECT count(*) FROM jobq._job_archive"
                        " WHERE queue = 'tenants' AND status = 'completed'")
    assert done == total, "every job completed once"
    # How many jobs in all had finished when the last small key's last job did (ties count as before).
    finished_by = scalar(conn, """
        SELECT count(*) FROM jobq._job_archive
        WHERE queue = 'tenants'
          AND finished_at <= (SELECT max(finished_at) FROM jobq._job_archive
                              WHERE queue = 'tenants' AND payload ->> 'k' <> 'big')""")
    # The same for the claims: how many jobs in all had been claimed with the last small key's last job.
    started_by = scalar(conn, """
        SELECT count(*) FROM jobq._job_archive
        WHERE queue = 'tenants'
          AND started_at <= (SELECT max(started_at) FROM jobq._job_archive
                             WHERE queue = 'tenants' AND payload ->> 'k' <> 'big')""")
    report("fair queue starvation", {
        "jobs_claimed_when_small_keys_claimed": started_by,
        "big_key_jobs": big, "small_keys": small_keys, "small_jobs_each": small_each,
        "jobs_finished_when_small_keys_done": finished_by, "fifo_would_be": total,
        "drain_seconds": round(seconds, 1), "workers": WORKERS, "batch": BATCH}, tmp_path)
    assert finished_by <= within, (
        f"the small keys finished only after {finished_by} jobs in all (allowed {within})")


def test_a_weight_of_3_gets_three_times_the_turns(conn: Conn, dsn: str, tmp_path: Path) -> None:
    each = scaled(3_000)
    conn.execute("""SELECT jobq.configure_queue('weighted', fair => true, fair_weights => '{"gold": 3}')""")
    keep_history(conn, "weighted")
    enqueue_keys(conn, "weighted", "silver", each)
    enqueue_keys(conn, "weighted", "gold", each)
    drain(conn, dsn, "weighted", tmp_path, 2 * each)
    # While both keys had jobs: the claims up to the one that took gold's last job.
    row = conn.execute("""
        SELECT count(*) FILTER (WHERE payload ->> 'k' = 'gold'),
               count(*) FILTER (WHERE payload ->> 'k' = 'silver')
        FROM jobq._job_archive
        WHERE queue = 'weighted'
          AND started_at < (SELECT max(started_at) FROM jobq._job_archive
                            WHERE queue = 'weighted' AND payload ->> 'k' = 'gold')""").fetchone()
    assert row is not None
    gold, silver = int(row[0]), int(row[1])
    ratio = gold / max(silver, 1)
    report("fair queue weights", {"gold_weight": 3, "gold_turns": gold, "silver_turns": silver,
                                  "ratio": round(ratio, 2)}, tmp_path)
    assert 2.4 <= ratio <= 3.6, (
        f"gold had {gold} turns and silver {silver}: ratio {ratio:.2f}, not 3 within 20 %")


# --- per_key_concurrency under racing claimers ------------------------------------------------

@dataclass
class Race:
    """What the racing claimers share: the key of every job, and the runs so far."""

    dsn: str
    keys: dict[int, str]
    total: int
    runs: list[tuple[str, datetime, datetime]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def finished(self) -> bool:
        with self.lock:
            return len(self.runs) >= self.total


def racer(stop: threading.Event, race: Race, name: str, seed: int) -> None:
    """Claim 1..3 jobs, hold them a random moment, complete them; until every job has run."""
    rng = random.Random(seed)
    with psycopg.connect(race.dsn, autocommit=True) as conn:
        while not (stop.is_set() or race.finished()):
            jobs = conn.execute("SELECT id, lease_token, clock_timestamp() FROM jobq.claim('pk', %s, %s)",
                                (rng.randint(1, 3), name)).fetchall()
            if not jobs:
                time.sleep(0.005)
                continue
            time.sleep(rng.uniform(0.005, 0.03))
            for job_id, token, started in jobs:
                ended = scalar(conn, "SELECT clock_timestamp()")
                assert scalar(conn, "SELECT jobq.complete(%s, %s)", (job_id, token)) is True
                with race.lock:
                    race.runs.append((race.keys[int(job_id)], started, ended))


def test_per_key_concurrency_holds_under_8_racing_claimers(conn: Conn, dsn: str) -> None:
    limit, per_key, key_names = 2, scaled(20), ["a", "b", "c"]
    conn.execute("SELECT jobq.configure_queue('pk', fair => true, per_key_concurrency => %s)", (limit,))
    keys: dict[int, str] = {}
    for key in key_names:
        for job_id in pyqueue.enqueue_many(conn, "pk", [{}] * per_key, fair_keys=[key] * per_key):
            keys[job_id] = key
    race = Race(dsn, keys, len(keys))
    samples: dict[str, list[int]] = defaultdict(list)
    threads = Threads()

    def sample(stop: threading.Event) -> None:
        # Count the running jobs of every key, continuously, from a session of its own.
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not (stop.is_set() or race.finished()):
                counts: dict[str, int] = dict(watcher.execute(
                    "SELECT fair_key, count(*) FROM jobq._job WHERE queue = 'pk' AND status = 'running'"
                    " GROUP BY fair_key").fetchall())
                for key in key_names:
                    samples[key].append(int(counts.get(key, 0)))

    threads.start("sampler", sample)
    for i in range(RACERS):
        threads.start(f"racer-{i}", racer, race, f"racer-{i}", i)
    threads.join()

    runs = race.runs
    assert len(runs) == race.total, "every job ran once"
    for key in key_names:
        overlap = max_overlap((started, ended) for k, started, ended in runs if k == key)
        assert overlap <= limit, f"{overlap} jobs of key {key} overlapped under per_key_concurrency = {limit}"
        assert samples[key], "the sampler took no sample"
        assert max(samples[key]) <= limit, f"sampled {max(samples[key])} running jobs of key {key}"
    assert max(max_overlap((s, e) for k, s, e in runs if k == key) for key in key_names) == limit, (
        "the claimers never filled a key's slots")


# --- leases in place, wherever their key sits in the claim index (issue 28 §2) ------------------

def test_reap_and_the_counts_find_a_fair_lease_behind_another_keys_backlog(conn: Conn) -> None:
    # Key "big" first, with more jobs than the first step of the walk that
    # finds leases in place (1,000 of the claim index): key "small"'s job
    # sits behind all of them in the claim index, at the head of its own key.
    # A fair claim of 2 leases both heads; reap and every live count must
    # find both, whether leased in place (a HOT update) or parked.
    conn.execute("SELECT jobq.configure_queue('inplace', fair => true)")
    enqueue_keys(conn, "inplace", "big", 2_500)
    enqueue_keys(conn, "inplace", "small", 1)
    claimed = conn.execute("SELECT id FROM jobq.claim('inplace', 2, 'w1', interval '1 second')").fetchall()
    ids = [int(r[0]) for r in claimed]
    state = "SELECT fair_key, status, parked, attempts FROM jobq._job WHERE id = ANY (%s) ORDER BY fair_key"
    leased = conn.execute(state, (ids,)).fetchall()
    assert scalar(conn, "SELECT running FROM jobq.stats WHERE queue = 'inplace'") == 2
    assert scalar(conn, "SELECT jobs FROM jobq.workers WHERE worker = 'w1'") == 2
    assert scalar(conn, "SELECT running FROM jobq.fair_keys"
                        " WHERE queue = 'inplace' AND fair_key = 'small'") == 1
    expired = "SELECT bool_and(lease_expires_at < now()) FROM jobq._job WHERE id = ANY (%s)"
    wait_until(lambda: scalar(conn, expired, (ids,)), "the leases to expire", timeout=30)
    assert scalar(conn, "SELECT jobq.reap()") == 2, "reap returned both expired leases"
    back = conn.execute(state, (ids,)).fetchall()
    assert back == [("big", "ready", False, 1), ("small", "ready", False, 1)]
    # How: the head of the claim index leased in place, the job far behind it parked.
    assert leased == [("big", "running", False, 1), ("small", "running", True, 1)]



def test_a_key_whose_first_job_another_session_holds_gives_its_next(conn: Conn, dsn: str) -> None:
    # The fair claim locks each key's first job where its key walk found it;
    # when another session holds that row (FOR UPDATE SKIP LOCKED skips it),
    # or it is not ready (a lease in place), the key still gives its next
    # ready job in this turn, as a locking scan of the key's jobs would.
    conn.execute("SELECT jobq.configure_queue('held', fair => true)")
    for key in ("a", "b", "c"):
        enqueue_keys(conn, "held", key, 3)
    first = {key: scalar(conn, "SELECT min(id) FROM jobq._job WHERE queue = 'held' AND fair_key = %s", (key,))
             for key in ("a", "b", "c")}
    claim = "SELECT id FROM jobq.claim('held', 3, 'w') ORDER BY id"
    with psycopg.connect(dsn) as other:  # its transaction holds key a's first job
        other.execute("SELECT id FROM jobq._job WHERE id = %s FOR UPDATE", (first["a"],))
        got = [int(r[0]) for r in conn.execute(claim).fetchall()]
        keys = conn.execute("SELECT fair_key FROM jobq._job WHERE id = ANY (%s) ORDER BY fair_key",
                            (got,)).fetchall()
        assert [k[0] for k in keys] == ["a", "b", "c"], "one job of each key"
        assert first["a"] not in got and first["b"] in got and first["c"] in got
        other.rollback()
    # Now b's and c's first jobs are leases in place, and a's is free again.
    again = [int(r[0]) for r in conn.execute(claim).fetchall()]
    keys = conn.execute("SELECT fair_key FROM jobq._job WHERE id = ANY (%s) ORDER BY fair_key",
                        (again,)).fetchall()
    assert [k[0] for k in keys] == ["a", "b", "c"]
    assert first["a"] in again and not set(again) & set(got)

def test_a_keyless_job_committed_while_the_queue_turns_fair_is_claimed(conn: Conn, dsn: str) -> None:
    # A producer's transaction enqueues a job without a fair key into a plain
    # queue and stays open; meanwhile configure_queue(fair => true) runs and
    # a third session enqueues. Whatever the order they commit in, every job
    # ends up in the fair index (key ''), where a fair claim finds it.
    done: dict[str, bool] = {}

    def in_session(name: str, statement: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as session:
            session.execute(statement)
        done[name] = True

    with psycopg.connect(dsn) as producer:  # not autocommit: its transaction stays open
        producer.execute("SELECT jobq.enqueue('turning', '{\"by\": \"producer\"}')")
        turn = threading.Thread(target=in_session,
                                args=("configure", "SELECT jobq.configure_queue('turning', fair => true)"))
        turn.start()
        # Until configure_queue ran through, or waits for the producer's transaction.
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                   " AND datname = current_database() AND query LIKE '%configure_queue%'")
        wait_until(lambda: done.get("configure") or scalar(conn, waiting) > 0, "configure_queue")
        other = threading.Thread(target=in_session,
                                 args=("enqueue", "SELECT jobq.enqueue('turning', '{\"by\": \"other\"}')"))
        other.start()
        time.sleep(0.2)
        producer.commit()
    turn.join(timeout=60)
    other.join(timeout=60)
    assert done == {"configure": True, "enqueue": True}
    keys = conn.execute("SELECT payload ->> 'by', fair_key FROM jobq._job WHERE queue = 'turning'"
                        " ORDER BY 1").fetchall()
    assert keys == [("other", ""), ("producer", "")], "every job of the fair queue has a fair key"
    claimed = conn.execute("SELECT id FROM jobq.claim('turning', 10)").fetchall()
    assert len(claimed) == 2, "a fair claim finds both jobs"


# --- pyqueue ------------------------------------------------------------------------------------

def test_pyqueue_enqueues_fair_keys_and_configures_a_fair_queue(conn: Conn) -> None:
    settings = pyqueue.configure_queue(conn, "fq", fair=True, fair_weights={"gold": 3}, per_key_concurrency=5)
    fair = (settings["fair"], settings["fair_weights"], settings["per_key_concurrency"])
    assert fair == (True, {"gold": 3}, 5)
    one = pyqueue.enqueue(conn, "fq", {"n": 1}, fair_key="acme")
    many = pyqueue.enqueue_many(conn, "fq", [{"n": 2}, {"n": 3}], fair_keys=["globex", None])
    stored = dict(conn.execute("SELECT id, fair_key FROM jobq._job WHERE queue = 'fq'").fetchall())
    assert stored == {one: "acme", many[0]: "globex", many[1]: ""}
    claimed = pyqueue.claim(conn, "fq", 3)
    assert sorted(job.id for job in claimed) == sorted([one, *many]), "one job of each of the three keys"
    assert pyqueue.configure_queue(conn, "fq", fair=False)["fair"] is False


@pytest.mark.parametrize(("call", "error"), [
    (lambda c: pyqueue.enqueue(c, "fq", {}, fair_key=""), pyqueue.InvalidJobKey),
    (lambda c: pyqueue.enqueue(c, "fq", {}, fair_key="x" * 513), pyqueue.InvalidJobKey),
    (lambda c: pyqueue.enqueue(c, "fq", {}, group_key="g"), pyqueue.InvalidJobKey),
    (lambda c: pyqueue.enqueue_many(c, "fq", [{}, {}], fair_keys=["a"]), pyqueue.InvalidJobKey),
    (lambda c: pyqueue.enqueue_many(c, "fq", [{}], fair_keys="a"), pyqueue.InvalidJobKey),
    (lambda c: pyqueue.configure_queue(c, "fq", fair_weights={"gold": -1}), pyqueue.InvalidSetting),
    (lambda c: pyqueue.configure_queue(c, "fq", fair_weights={"": 2}), pyqueue.InvalidSetting),
    (lambda c: pyqueue.configure_queue(c, "fq", fair_weights=[3]), pyqueue.InvalidSetting),
    (lambda c: pyqueue.configure_queue(c, "fq", fair="yes"), pyqueue.InvalidSetting),
    (lambda c: pyqueue.configure_queue(c, "fq", per_key_concurrency=-1), pyqueue.InvalidSetting),
    (lambda c: pyqueue.configure_queue(c, "plain", per_key_concurrency=2), pyqueue.InvalidSetting),
], ids=["empty-key", "long-key", "group-on-fair", "keys-length", "keys-str", "negative-weight",
        "weight-empty-key", "weights-list", "fair-not-bool", "negative-limit", "limit-not-fair"])
def test_bad_fair_input_is_a_typed_error_that_changes_nothing(
    conn: Conn, call: Any, error: type[Exception]
) -> None:
    pyqueue.configure_queue(conn, "fq", fair=True)
    pyqueue.enqueue(conn, "fq", {}, fair_key="a")
    before = snapshot(conn)
    with pytest.raises(error) as raised:
        call(conn)
    assert raised.value.hint, "the error carries a hint"  # type: ignore[attr-defined]
    assert snapshot(conn) == before


def test_the_dashboard_shows_a_fair_queues_keys(conn: Conn, dsn: str, tmp_path: Path) -> None:
    pyqueue.configure_queue(conn, "tenants", fair=True)
    pyqueue.enqueue_many(conn, "tenants", [{}] * 3, fair_keys=["acme", "acme", "<b>globex</b>"])
    pyqueue.enqueue(conn, "tenants", {})
    pyqueue.enqueue(conn, "plain", {})
    conn.execute("SELECT jobq.claim('tenants', 1)")  # the first turn: the keyless jobs' (key '')
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        fair, plain = client.get("/queues/tenants"), client.get("/queues/plain")
    assert fair.status == plain.status == 200
    rows = re.findall(r'<tr data-fair-key="([^"]*)">\s*<td class="key">(.*?)</td>\s*'
                      r'<td class="num ready">(\d+)</td>\s*<td class="num scheduled">(\d+)</td>\s*'
                      r'<td class="num running">(\d+)</td>', fair.body)
    assert rows == [("acme", "acme", "2", "0", "0"), ("", "<em>(no key)</em>", "0", "0", "1"),
                    ("&lt;b&gt;globex&lt;/b&gt;", "&lt;b&gt;globex&lt;/b&gt;", "1", "0", "0")], rows
    assert 'id="fair-keys"' not in plain.body, "a plain queue has no fair keys table"
