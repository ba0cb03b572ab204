"""jobq 0.4 through pyqueue, sync and async, and the command line: the
operator verbs (cancel_jobs, discard_dead; ``pyqueue cancel QUEUE``,
``pyqueue discard-dead``), the enqueue options timeout and unique_for
(``pyqueue enqueue --timeout --unique-for``), a queue's default timeout,
every(..., runner=...) and the new columns of schedules(); and that calls
which do not use the new options still work on a jobq 0.3 database. Also
the verbs in SQL (cancel_jobs by status and payload, discard_dead by age)
and the NULLs and zeros the views show."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue import aio
from tests.conftest import SQL_DIR, proc_dsn
from tests.test_cli import cli, ok
from tests.worker_support import job_status, keep_history, scalar

Conn = psycopg.Connection[Any]


def seed_live_jobs(conn: Conn, queue: str = "ops") -> dict[str, int]:
    """Jobs of ``queue`` in every live state (and a completed and a dead one),
    plus a ready job of another queue."""
    keep_history(conn, [queue])
    ids = {
        "ready_a": pyqueue.enqueue(conn, queue, {"tenant": 1, "kind": "a"}),
        "ready_b": pyqueue.enqueue(conn, queue, {"tenant": 2, "kind": "b"}),
        "scheduled": pyqueue.enqueue(conn, queue, {"tenant": 1, "kind": "s"}, delay=3600),
        "running": pyqueue.enqueue(conn, queue, {"tenant": 1, "kind": "r"}, priority=-10),
        "done": pyqueue.enqueue(conn, queue, {"tenant": 1, "kind": "d"}, priority=-20),
        "dead": pyqueue.enqueue(conn, queue, {"tenant": 1, "kind": "x"}, priority=-30, max_attempts=1),
        "other_queue": pyqueue.enqueue(conn, "elsewhere", {"tenant": 1}),
    }
    dead, done, running = pyqueue.claim(conn, queue, 3)
    assert (dead.id, done.id, running.id) == (ids["dead"], ids["done"], ids["running"])
    assert dead.fail("boom") and done.complete()
    return ids


def statuses(conn: Conn, ids: dict[str, int]) -> dict[str, str | None]:
    return {name: job_status(conn, job_id) for name, job_id in ids.items()}


def test_cancel_jobs_by_status_and_payload_returns_how_many(conn: Conn) -> None:
    ids = seed_live_jobs(conn)
    assert pyqueue.cancel_jobs(conn, "ops", status="scheduled") == 1
    assert pyqueue.cancel_jobs(conn, "ops", payload_contains={"tenant": 2}) == 1
    assert statuses(conn, ids) == {
        "ready_a": "ready", "ready_b": "cancelled", "scheduled": "cancelled", "running": "running",
        "done": "completed", "dead": "dead", "other_queue": "ready",
    }
    assert pyqueue.cancel_jobs(conn, "ops", status="ready", payload_contains={"kind": "nope"}) == 0
    assert pyqueue.cancel_jobs(conn, "ops") == 2  # every live job left: ready_a and running
    assert statuses(conn, ids)["running"] == "cancelled"
    assert pyqueue.cancel_jobs(conn, "ops") == 0
    assert job_status(conn, ids["other_queue"]) == "ready"


def test_a_cancelled_running_jobs_holder_loses_its_lease(conn: Conn) -> None:
    pyqueue.enqueue(conn, "held", {"n": 1})
    [job] = pyqueue.claim(conn, "held")
    assert pyqueue.cancel_jobs(conn, "held", status="running") == 1
    assert job.heartbeat() is False and job.complete() is False
    assert job_status(conn, job.id) == "cancelled"


def test_cancel_jobs_refuses_a_status_jobq_does_not_know(conn: Conn) -> None:
    pyqueue.enqueue(conn, "ops", {})
    with pytest.raises(pyqueue.InvalidArgument) as caught:
        pyqueue.cancel_jobs(conn, "ops", status="dead")
    assert type(caught.value) is pyqueue.InvalidArgument and caught.value.sqlstate == "JQ017"
    assert "status" in caught.value.message and caught.value.hint
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'ready'") == 1


def make_dead(conn: Conn, queue: str, n: int) -> list[int]:
    ids = [pyqueue.enqueue(conn, queue, {"n": i}, max_attempts=1) for i in range(n)]
    for job in pyqueue.claim(conn, queue, n):
        assert job.fail("boom")
    return ids


def test_discard_dead_all_or_only_the_old_ones(conn: Conn) -> None:
    old = make_dead(conn, "dl", 2)
    conn.execute("UPDATE jobq._job_archive SET finished_at = now() - interval '2 days' WHERE id = ANY(%s)",
                 (old,))
    recent = make_dead(conn, "dl", 1)
    other = make_dead(conn, "other", 1)
    live = pyqueue.enqueue(conn, "dl", {})
    assert pyqueue.discard_dead(conn, "dl", older_than=timedelta(days=1)) == 2
    assert [job_status(conn, i) for i in old] == [None, None]
    assert pyqueue.retry(conn, old[0]) is False  # gone for good
    assert pyqueue.discard_dead(conn, "dl", older_than=86400) == 0
    assert pyqueue.discard_dead(conn, "dl") == 1
    assert job_status(conn, recent[0]) is None
    assert job_status(conn, other[0]) == "dead" and job_status(conn, live) == "ready"
    with pytest.raises(pyqueue.InvalidInterval):
        pyqueue.discard_dead(conn, "dl", older_than=-1)


def test_the_async_operator_verbs(conn: Conn, dsn: str) -> None:
    ids = seed_live_jobs(conn)
    make_dead(conn, "adl", 2)

    async def main() -> tuple[int, int, int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            by_payload = await aio.cancel_jobs(aconn, "ops", payload_contains={"kind": "a"})
            the_rest = await aio.cancel_jobs(aconn, "ops", status=None)
            discarded = await aio.discard_dead(aconn, "adl", older_than=timedelta(0))
            return by_payload, the_rest, discarded

    assert asyncio.run(main()) == (1, 3, 2)
    assert statuses(conn, ids)["ready_b"] == "cancelled"
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'adl'") == 0


# --- enqueue options and the queue's default timeout --------------------------------

def test_enqueue_timeout_and_the_queues_default(conn: Conn) -> None:
    own = pyqueue.enqueue(conn, "slow", {}, timeout=timedelta(seconds=90))
    seconds = pyqueue.enqueue_many(conn, "slow", [{}, {}], timeout=30)
    settings = pyqueue.configure_queue(conn, "slow", timeout=timedelta(minutes=2))
    assert settings["timeout"] == timedelta(minutes=2)
    default = pyqueue.enqueue(conn, "slow", {})
    none = pyqueue.enqueue(conn, "fast", {})
    timeouts = dict(conn.execute("SELECT id, timeout FROM jobq.jobs").fetchall())
    assert timeouts == {own: timedelta(seconds=90), seconds[0]: timedelta(seconds=30),
                        seconds[1]: timedelta(seconds=30), default: timedelta(minutes=2), none: None}
    assert pyqueue.configure_queue(conn, "slow", timeout=0)["timeout"] is None
    claimed = dict(conn.execute("SELECT id, timeout FROM jobq.claim('slow', 10)").fetchall())
    assert claimed[own] == timedelta(seconds=90) and claimed[default] == timedelta(minutes=2)
    with pytest.raises(pyqueue.InvalidInterval) as caught:
        pyqueue.enqueue(conn, "slow", {}, timeout=timedelta(days=2))
    assert "timeout" in caught.value.message


def test_unique_for_deduplicates_against_a_recently_completed_job(conn: Conn) -> None:
    first = pyqueue.enqueue(conn, "digest", {"n": 1}, key="user:7", unique_for=3600)
    [job] = pyqueue.claim(conn, "digest")
    assert job.id == first and job.complete()
    assert pyqueue.enqueue(conn, "digest", {"n": 2}, key="user:7", unique_for=timedelta(hours=1)) == first
    [again] = pyqueue.enqueue_many(conn, "digest", [{"n": 3}], keys=["user:7"], unique_for=3600)
    assert again == first
    fresh = pyqueue.enqueue(conn, "digest", {"n": 4}, key="user:7")  # without unique_for: a new job
    assert fresh != first
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'digest' AND status = 'ready'") == 1
    with pytest.raises(pyqueue.InvalidJobKey) as caught:
        pyqueue.enqueue(conn, "digest", {}, unique_for=60)  # needs a key
    assert "unique_for" in caught.value.message


def test_async_enqueue_options(conn: Conn, dsn: str) -> None:
    async def main() -> tuple[int, int, list[int]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            first = await aio.enqueue(aconn, "adigest", {}, key="k", unique_for=60, timeout=5)
            [job] = await aio.claim(aconn, "adigest")
            assert await job.complete()
            again = await aio.enqueue(aconn, "adigest", {}, key="k", unique_for=60)
            many = await aio.enqueue_many(aconn, "adigest", [{}], timeout=timedelta(seconds=7))
            settings = await aio.configure_queue(aconn, "adigest", timeout=11)
            assert settings["timeout"] == timedelta(seconds=11)
            return first, again, many

    first, again, many = asyncio.run(main())
    assert first == again
    assert scalar(conn, "SELECT timeout FROM jobq.jobs WHERE id = %s", (many[0],)) == timedelta(seconds=7)


# --- periodic jobs: runner and the new columns ---------------------------------------

def test_every_with_runner_workers_and_schedules_show_it(conn: Conn, dsn: str) -> None:
    assert pyqueue.every(conn, "tick", "*/5 * * * *", "ticks", {"n": 1}, runner="workers") is None
    assert pyqueue.every(conn, "default", "0 3 * * *", "ticks") is None  # no pg_cron here: the workers
    with pytest.raises(pyqueue.PgCronMissing):
        pyqueue.every(conn, "cron", "0 3 * * *", "ticks", runner="pg_cron")
    with pytest.raises(pyqueue.InvalidArgument) as caught:
        pyqueue.every(conn, "bad", "0 3 * * *", "ticks", runner="cron")
    assert "runner" in caught.value.message
    [default, tick] = pyqueue.schedules(conn)
    assert (tick.name, tick.runner, tick.payload, tick.last_run_at) == ("tick", "workers", {"n": 1}, None)
    assert tick.next_run_at is not None and tick.next_run_at.minute % 5 == 0
    assert default.runner == "workers" and default.next_run_at is not None

    async def main() -> list[pyqueue.Schedule]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            assert await aio.every(aconn, "atick", "* * * * *", "ticks", runner="workers") is None
            schedules = await aio.schedules(aconn)
            assert await aio.unschedule(aconn, "atick") is True
            return schedules

    assert [s.name for s in asyncio.run(main())] == ["atick", "default", "tick"]
    assert [s.name for s in pyqueue.schedules(conn)] == ["default", "tick"]


@pytest.fixture
def old_dsn(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """A fresh database with jobq 0.3.0 installed, dropped afterwards."""
    name = f"jobq_old_{uuid.uuid4().hex[:10]}"
    admin = proc_dsn(postgresql_proc, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = proc_dsn(postgresql_proc, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((SQL_DIR / "jobq--0.3.0.sql").read_text().encode())
    yield dsn
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_calls_without_the_new_options_work_on_jobq_0_3(old_dsn: str) -> None:
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        assert scalar(conn, "SELECT jobq.version()") == "0.3.0"
        job_id = pyqueue.enqueue(conn, "q", {"n": 1}, key="k", group_key="g")
        assert pyqueue.enqueue_many(conn, "q", [{}], keys=["k2"])
        assert pyqueue.configure_queue(conn, "q", lease=60)["lease"] == timedelta(seconds=60)
        # A periodic job as jobq 0.3's every() stores it (pg_cron is not installed here).
        conn.execute("INSERT INTO jobq._periodic (name, schedule, queue, payload) "
                     "VALUES ('nightly', '0 3 * * *', 'q', '{}')")
        [schedule] = pyqueue.schedules(conn)
        assert (schedule.name, schedule.schedule, schedule.runner, schedule.next_run_at) == \
            ("nightly", "0 3 * * *", None, None)
        [job] = pyqueue.claim(conn, "q")
        assert job.id == job_id and job.complete()
        with pytest.raises(pyqueue.errors.JobqOutdated) as outdated:  # an option this version lacks
            pyqueue.enqueue(conn, "q", {}, timeout=5)
        assert outdated.value.installed == "0.3.0" and "pyqueue upgrade" in str(outdated.value.hint)


# --- the command line ----------------------------------------------------------------

def test_cli_cancel_a_queue_by_status_and_payload_prints_how_many(dsn: str, conn: Conn) -> None:
    ids = seed_live_jobs(conn)
    out = ok("cancel", "ops", "--status", "scheduled", "--dsn", dsn)
    assert out.strip() == "1 scheduled job of queue ops cancelled"
    out = ok("cancel", "ops", "--where", '{"tenant": 2}', "--dsn", dsn)
    assert out.strip() == "1 job of queue ops cancelled"
    assert ok("cancel", "ops", "--dsn", dsn).strip() == "2 jobs of queue ops cancelled"
    assert statuses(conn, ids) == {
        "ready_a": "cancelled", "ready_b": "cancelled", "scheduled": "cancelled", "running": "cancelled",
        "done": "completed", "dead": "dead", "other_queue": "ready",
    }


def test_cli_cancel_one_job_with_id_and_refusals(dsn: str, conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "one", {})
    assert ok("cancel", "--id", str(job_id), "--dsn", dsn).strip() == f"job {job_id} cancelled"
    again = cli("cancel", "--id", str(job_id), "--dsn", dsn)
    assert again.returncode == 1 and "not cancelled" in again.stderr
    other = pyqueue.enqueue(conn, "42", {})
    looks_like_an_id = cli("cancel", "42", "--dsn", dsn)
    assert looks_like_an_id.returncode == 2 and "--id 42" in looks_like_an_id.stderr
    assert job_status(conn, other) == "ready"
    assert ok("cancel", "42", "--where", "{}", "--dsn", dsn).strip() == "1 job of queue 42 cancelled"
    bad_status = cli("cancel", "one", "--status", "dead", "--dsn", dsn)
    assert bad_status.returncode == 2 and "invalid choice" in bad_status.stderr
    bad_json = cli("cancel", "one", "--where", "{tenant: 1}", "--dsn", dsn)
    assert bad_json.returncode == 2 and "--where is not valid JSON" in bad_json.stderr
    not_an_object = cli("cancel", "one", "--where", "[1]", "--dsn", dsn)
    assert not_an_object.returncode == 2 and "payload_contains must be a JSON object" in not_an_object.stderr
    both = cli("cancel", "one", "--id", "1", "--dsn", dsn)
    assert both.returncode == 2
    assert cli("cancel", "--dsn", dsn).returncode == 2  # QUEUE or --id


def test_cli_discard_dead_prints_how_many(dsn: str, conn: Conn) -> None:
    old = make_dead(conn, "dl", 2)
    conn.execute("UPDATE jobq._job_archive SET finished_at = now() - interval '2 days' WHERE id = ANY(%s)",
                 (old,))
    make_dead(conn, "dl", 1)
    out = ok("discard-dead", "dl", "--older-than", "86400", "--dsn", dsn)
    assert out.strip() == "2 dead jobs of queue dl discarded"
    assert ok("discard-dead", "dl", "--dsn", dsn).strip() == "1 dead job of queue dl discarded"
    assert ok("discard-dead", "dl", "--dsn", dsn).strip() == "0 dead jobs of queue dl discarded"
    assert cli("discard-dead", "dl", "--older-than", "-1", "--dsn", dsn).returncode == 2


def test_cli_enqueue_with_timeout_and_unique_for(dsn: str, conn: Conn) -> None:
    first = int(ok("enqueue", "digest", '{"n": 1}', "--key", "u7", "--unique-for", "3600",
                   "--timeout", "2.5", "--dsn", dsn))
    assert scalar(conn, "SELECT timeout FROM jobq.jobs WHERE id = %s", (first,)) == timedelta(seconds=2.5)
    [job] = pyqueue.claim(conn, "digest")
    assert job.complete()
    again = int(ok("enqueue", "digest", '{"n": 2}', "--key", "u7", "--unique-for", "3600", "--dsn", dsn))
    assert again == first
    assert cli("enqueue", "digest", "{}", "--timeout", "0", "--dsn", dsn).returncode == 2
    too_long = cli("enqueue", "digest", "{}", "--timeout", "172800", "--dsn", dsn)
    assert too_long.returncode == 2 and "timeout" in too_long.stderr
    nan = cli("enqueue", "digest", '{"x": NaN}', "--dsn", dsn)  # Python's json reads NaN: jobq refuses it
    assert nan.returncode == 2 and "error: jobq: payload cannot be sent as JSON" in nan.stderr
    huge = cli("enqueue", "digest", "{}", "--priority", str(2**40), "--dsn", dsn)
    assert huge.returncode == 2 and "priority" in huge.stderr and "Traceback" not in huge.stderr
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'digest'") == 0  # none added


def test_cli_stats_json_says_null_when_nothing_is_ready(dsn: str, conn: Conn) -> None:
    pyqueue.enqueue(conn, "later", {}, delay=3600)
    [row] = json.loads(ok("stats", "--json", "--dsn", dsn))
    assert row["queue"] == "later" and row["scheduled"] == 1 and row["oldest_ready_age"] is None
    assert "later" in ok("stats", "--dsn", dsn)


# --- the verbs and the views in SQL ------------------------------------------------------------

def enqueue_many_sql(conn: Conn, queue: str, n: int, **options: object) -> list[int]:
    named = "".join(f", {name} => %({name})s" for name in options)
    rows = conn.execute(
        f"SELECT jobq.enqueue_many(%(queue)s, array_fill('{{}}'::jsonb, ARRAY[%(n)s]){named})",
        {"queue": queue, "n": n, **options}).fetchall()
    return [int(str(r[0])) for r in rows]



def test_cancel_jobs_by_status_and_payload(conn: Conn) -> None:
    for i in range(4):
        conn.execute("SELECT jobq.enqueue('cj', %s)", (Jsonb({"customer": i % 2}),))
    conn.execute("SELECT jobq.enqueue('cj', '{\"customer\": 1}', run_at => now() + interval '1 hour')")
    conn.execute("SELECT jobq.enqueue('other', '{\"customer\": 1}')")
    running = conn.execute("SELECT id, lease_token FROM jobq.claim('cj', 1)").fetchone()
    assert running is not None
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj', 'scheduled')") == 1
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj', 'ready', '{\"customer\": 1}')") == 2
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj', 'running')") == 1
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", running) is False, "its holder lost the lease"
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj')") == 1
    statuses = conn.execute(
        "SELECT queue, status, count(*) FROM jobq.jobs GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert statuses == [("cj", "cancelled", 5), ("other", "ready", 1)]


def test_discard_dead_by_age(conn: Conn) -> None:
    ids = enqueue_many_sql(conn, "dd", 3, max_attempts=1)
    conn.execute("SELECT jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('dd', 3) AS c")
    conn.execute("UPDATE jobq._job_archive SET finished_at = now() - interval '8 days' WHERE id = %s",
                 (ids[0],))
    assert scalar(conn, "SELECT jobq.discard_dead('dd', interval '7 days')") == 1
    assert scalar(conn, "SELECT jobq.retry(%s)", (ids[0],)) is False, "gone for good"
    row = conn.execute("SELECT dead, dead_total FROM jobq.stats WHERE queue = 'dd'").fetchone()
    assert row == (2, 3), "two dead left; the total still counts the one discarded"
    assert scalar(conn, "SELECT jobq.discard_dead('dd')") == 2
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'dd'") == 0


def test_views_say_null_and_zero_as_documented(conn: Conn) -> None:
    conn.execute("SELECT jobq.enqueue('v', '{}', run_at => now() + interval '1 hour')")
    row = conn.execute("SELECT ready, oldest_ready_age FROM jobq.stats WHERE queue = 'v'").fetchone()
    assert row == (0, None), "nothing ready: no age"
    row = conn.execute(
        "SELECT updated_at, concurrency, rate_limit FROM jobq.queues WHERE queue = 'v'").fetchone()
    assert row == (None, 0, 0), "never configured; 0 = no limit, as configure_queue takes it"
