"""What the dashboard reads, and only from jobq's public views (jobq.stats,
jobq.queues, jobq.jobs, jobq.job_errors, jobq.job_dependencies,
jobq.schedules, jobq.workers, jobq.throughput, jobq.fair_keys), so a login holding only ``jobq_viewer``
can serve it.

Each function takes an autocommit AsyncConnection and returns plain dicts
(or None); the pages decide what to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

Row = dict[str, Any]
AsyncConnection = psycopg.AsyncConnection[Any]
PAGE_SIZE = 50  # jobs per page of a queue; one more is fetched to know whether a next page exists
# An error-text search (ILIKE '%…%' can use no index) reads at most this many of the queue's jobs
# per page, newest first; the next page goes on below them. So a search that matches nothing
# costs a bounded page, not a scan of the queue's whole history.
SEARCH_WINDOW = 20_000
CHART_MINUTES = 60  # the throughput chart's span
JOB_STATES = ("ready", "scheduled", "running", "completed", "dead", "cancelled", "waiting")
RELATIVES_SHOWN = 100  # parents (or children) listed on a job's page; a callback may have 100,000

# s.*: jobq 0.9's stats adds estimated (counts over 10,000 jobs are estimates,
# shown with ≈); an older jobq's rows just lack it.
OVERVIEW = """
SELECT s.*,
       coalesce(q.concurrency, 0) AS concurrency, coalesce(q.rate_limit, 0) AS rate_limit, q.rate_interval,
       coalesce(t.completed, 0) AS completed_hour, coalesce(t.failed, 0) AS failed_hour
FROM jobq.stats AS s
LEFT JOIN jobq.queues AS q ON q.queue = s.queue
LEFT JOIN (SELECT tp.queue, sum(tp.completed) AS completed, sum(tp.failed) AS failed
           FROM jobq.throughput AS tp GROUP BY tp.queue) AS t ON t.queue = s.queue
ORDER BY s.queue
"""

THROUGHPUT = """
SELECT date_trunc('minute', now()) AS now_minute, tp.minute, sum(tp.completed) AS completed,
       sum(tp.failed) AS failed
FROM (SELECT 1) AS one
LEFT JOIN jobq.throughput AS tp ON true
GROUP BY tp.minute
ORDER BY tp.minute
"""

QUEUE_STATS = "SELECT s.* FROM jobq.stats AS s WHERE s.queue = %(queue)s"

# A fair queue's busiest keys (jobq 0.12's jobq.fair_keys: at most 100 per queue).
FAIR_KEYS = """
SELECT k.fair_key, k.ready, k.scheduled, k.running, k.oldest_ready_age
FROM jobq.fair_keys AS k
WHERE k.queue = %(queue)s
ORDER BY k.rank
"""

QUEUE_HAS_JOBS = "SELECT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.queue = %(queue)s) AS found"

JOB_LIST = """
SELECT j.id, j.status, j.priority, j.run_at, j.attempts, j.max_attempts, j.job_key, j.worker,
       left(j.last_error, 200) AS last_error, j.created_at, j.finished_at,
       left(j.payload::text, 120) AS payload, left(j.meta::text, 120) AS meta
FROM jobq.jobs AS j
WHERE j.queue = %(queue)s{filters}
ORDER BY j.id DESC
LIMIT %(limit)s
"""

SEARCH_FLOOR = """
SELECT j.id FROM jobq.jobs AS j
WHERE j.queue = %(queue)s{before}
ORDER BY j.id DESC
OFFSET %(window)s LIMIT 1
"""

JOB = """
SELECT j.id, j.queue, j.payload, j.status, j.priority, j.run_at, j.attempts, j.max_attempts, j.job_key,
       j.worker, j.lease_expires_at, j.last_error, j.created_at, j.started_at, j.finished_at, j.group_key,
       j.timeout, j.heartbeat_at, j.result, j.cancelled_by, j.progress, j.meta
FROM jobq.jobs AS j WHERE j.id = %(id)s
"""

# A job's parents and children (jobq.job_dependencies) with their state; a
# relative jobq has forgotten (completed and pruned) has no jobq.jobs row: status NULL.
JOB_PARENTS = """
SELECT d.parent_id AS id, j.queue, j.status
FROM jobq.job_dependencies AS d LEFT JOIN jobq.jobs AS j ON j.id = d.parent_id
WHERE d.child_id = %(id)s
ORDER BY d.parent_id
LIMIT %(limit)s
"""

JOB_CHILDREN = """
SELECT d.child_id AS id, j.queue, j.status
FROM jobq.job_dependencies AS d LEFT JOIN jobq.jobs AS j ON j.id = d.child_id
WHERE d.parent_id = %(id)s
ORDER BY d.child_id
LIMIT %(limit)s
"""

JOB_RELATIVE_COUNTS = """
SELECT (SELECT count(*) FROM jobq.job_dependencies AS d WHERE d.child_id = %(id)s) AS parents,
       (SELECT count(*) FROM jobq.job_dependencies AS d WHERE d.parent_id = %(id)s) AS children
"""

JOB_ERRORS = """
SELECT e.attempt, e.error, e.failed_at, e.worker
FROM jobq.job_errors AS e WHERE e.job_id = %(id)s
ORDER BY e.failed_at, e.attempt
"""

JOB_STATUS = "SELECT j.status, j.queue FROM jobq.jobs AS j WHERE j.id = %(id)s"

SCHEDULES = """
SELECT s.name, s.schedule, s.queue, s.payload, s.priority, s.max_attempts, s.runner, s.next_run_at,
       s.last_run_at, s.created_at, s.updated_at
FROM jobq.schedules AS s ORDER BY s.name
"""

WORKERS = """
SELECT w.worker, w.queues, w.jobs, w.oldest_started_at, w.last_heartbeat_at, w.next_lease_expires_at,
       now() AS now
FROM jobq.workers AS w ORDER BY w.worker
"""


@dataclass(frozen=True)
class JobFilter:
    """The filters of a queue page: state, exact job key, error text, a JSON
    object the job's meta contains (its text, checked), and the keyset cursor."""

    state: str | None = None
    key: str | None = None
    error: str | None = None
    before: int | None = None
    meta: str | None = None

    def query_params(self, *, before: int | None = None) -> dict[str, str]:
        """The filters as query parameters (for links keeping them)."""
        found = {"state": self.state, "key": self.key, "error": self.error, "meta": self.meta}
        params = {name: value for name, value in found.items() if value}
        if before is not None:
            params["before"] = str(before)
        return params


def like_pattern(text: str) -> str:
    """An ILIKE pattern matching text anywhere, its wildcards taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def fetch_all(conn: AsyncConnection, query: str, params: dict[str, Any] | None = None) -> list[Row]:
    """Rows as dicts. Never prepared: a generic plan of the job list reads the
    whole archive by primary key for a small queue (187 ms instead of 21 ms
    at 1M archived jobs), where a custom plan uses the (queue, id) index."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query.encode(), params, prepare=False)
        return await cur.fetchall()


async def fetch_one(conn: AsyncConnection, query: str, params: dict[str, Any] | None = None) -> Row | None:
    rows = await fetch_all(conn, query, params)
    return rows[0] if rows else None


def with_estimated(row: Row) -> Row:
    """A stats row with its estimated flag (false from a jobq before 0.9, whose counts are all exact)."""
    row.setdefault("estimated", False)
    return row


async def overview(conn: AsyncConnection) -> list[Row]:
    """One row per known queue: counts (estimated: some are estimates), limits,
    and the last hour's completed/failed."""
    return [with_estimated(row) for row in await fetch_all(conn, OVERVIEW)]


async def throughput(conn: AsyncConnection) -> tuple[datetime, list[tuple[datetime, int, int]]]:
    """The database's current minute and (minute, completed, failed) for each
    of the CHART_MINUTES minutes ending with it, gaps filled with zeros."""
    rows = await fetch_all(conn, THROUGHPUT)
    now_minute: datetime = rows[0]["now_minute"]
    found = {row["minute"]: (int(row["completed"]), int(row["failed"])) for row in rows if row["minute"]}
    minutes = [now_minute - timedelta(minutes=back) for back in range(CHART_MINUTES - 1, -1, -1)]
    return now_minute, [(minute, *found.get(minute, (0, 0))) for minute in minutes]


async def queue_stats(conn: AsyncConnection, queue: str) -> Row | None:
    """The queue's row of jobq.stats; None when jobq knows no such queue (no
    stats row and no job of that queue)."""
    row = await fetch_one(conn, QUEUE_STATS, {"queue": queue})
    if row is not None:
        return with_estimated(row)
    found = await fetch_one(conn, QUEUE_HAS_JOBS, {"queue": queue})
    if found and found["found"]:
        return {"queue": queue, "ready": 0, "scheduled": 0, "waiting": 0, "running": 0, "dead": 0,
                "oldest_ready_age": None,
                "paused": False, "completed_total": 0, "failed_total": 0, "dead_total": 0, "estimated": False}
    return None


async def fair_keys(conn: AsyncConnection, queue: str) -> list[Row]:
    """The busiest fair keys of a fair queue with their ready, scheduled and
    running jobs ([] for a plain queue, and on a jobq older than 0.12)."""
    try:
        return await fetch_all(conn, FAIR_KEYS, {"queue": queue})
    except psycopg.errors.UndefinedTable:
        return []


@dataclass(frozen=True)
class JobsPage:
    """A page of a queue's jobs: its rows, the cursor of the next page (None
    on the last), and, for an error-text search, the id it searched down to
    (None when it reached the queue's oldest job)."""

    rows: list[Row]
    next_before: int | None
    searched_to: int | None = None


async def search_floor(conn: AsyncConnection, queue: str, before: int | None) -> int | None:
    """The id SEARCH_WINDOW jobs below ``before`` in the queue (an index
    walk, no row read twice), or None when fewer jobs are left."""
    params: dict[str, Any] = {"queue": queue, "window": SEARCH_WINDOW}
    clause = ""
    if before is not None:
        clause, params["before"] = " AND j.id < %(before)s", before
    row = await fetch_one(conn, SEARCH_FLOOR.format(before=clause), params)
    return None if row is None else int(row["id"])


async def jobs_page(conn: AsyncConnection, queue: str, where: JobFilter) -> JobsPage:
    """A page of the queue's jobs, newest first, from where.before down
    (keyset pagination: no OFFSET over rows shown); an error-text search
    reads at most SEARCH_WINDOW jobs (see there)."""
    filters, params = "", {"queue": queue, "limit": PAGE_SIZE + 1}
    if where.state:
        filters += " AND j.status = %(state)s"
        params["state"] = where.state
    if where.key:
        filters += " AND j.job_key = %(key)s"
        params["key"] = where.key
    if where.error:
        filters += " AND j.last_error ILIKE %(error)s"
        params["error"] = like_pattern(where.error)
    if where.meta:
        filters += " AND j.meta @> %(meta)s::jsonb"
        params["meta"] = where.meta
    if where.before is not None:
        filters += " AND j.id < %(before)s"
        params["before"] = where.before
    floor = await search_floor(conn, queue, where.before) if where.error else None
    if floor is not None:
        filters += " AND j.id > %(floor)s"
        params["floor"] = floor
    rows = await fetch_all(conn, JOB_LIST.format(filters=filters), params)
    if len(rows) > PAGE_SIZE:
        return JobsPage(rows[:PAGE_SIZE], int(rows[PAGE_SIZE - 1]["id"]))
    if floor is not None:  # the window ended before the page filled: go on below it
        return JobsPage(rows, floor + 1, searched_to=floor + 1)
    return JobsPage(rows, None)


async def job(conn: AsyncConnection, job_id: int) -> Row | None:
    """The job's row of jobq.jobs with every recorded error (``errors``), its
    first RELATIVES_SHOWN parents and children by id (``parents``,
    ``children``: id, queue, status) and how many it has of each
    (``parent_count``, ``child_count``); None for an unknown id."""
    row = await fetch_one(conn, JOB, {"id": job_id})
    if row is not None:
        params = {"id": job_id, "limit": RELATIVES_SHOWN}
        row["errors"] = await fetch_all(conn, JOB_ERRORS, params)
        row["parents"] = await fetch_all(conn, JOB_PARENTS, params)
        row["children"] = await fetch_all(conn, JOB_CHILDREN, params)
        counts = await fetch_one(conn, JOB_RELATIVE_COUNTS, params)
        assert counts is not None
        row["parent_count"], row["child_count"] = int(counts["parents"]), int(counts["children"])
    return row


async def job_status(conn: AsyncConnection, job_id: int) -> Row | None:
    """The job's status and queue, or None for an unknown id."""
    return await fetch_one(conn, JOB_STATUS, {"id": job_id})


async def schedules(conn: AsyncConnection) -> list[Row]:
    """Every periodic job, by name."""
    return await fetch_all(conn, SCHEDULES)


async def workers(conn: AsyncConnection) -> list[Row]:
    """Every worker holding a lease now, by name."""
    return await fetch_all(conn, WORKERS)
