"""The dashboard's pages (GET): overview, queue, job, schedules, workers, and
the checks of what a URL may carry (a malformed id or filter is a 400, an
unknown queue or job a 404).
"""

from __future__ import annotations

import json
import re

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from pyqueue.dashboard import chart, reads
from pyqueue.dashboard.database import connection
from pyqueue.dashboard.rendering import render

QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # what jobq accepts as a queue name
MAX_BIGINT = 2**63 - 1
MAX_FILTER_LENGTH = 1000  # characters of a key or error filter


def parse_id(text: str, what: str = "job id") -> int:
    """A job id from a URL or form: digits only, within bigint; else 400."""
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not 0 < int(text) <= MAX_BIGINT:
        raise HTTPException(400, f"{what} {text[:40]!r} is not a job id (a positive integer)")
    return int(text)


def parse_queue(text: str) -> str:
    """A queue name from a URL; 400 when jobq could never have such a queue."""
    if not QUEUE_NAME.fullmatch(text):
        raise HTTPException(400, f"{text[:140]!r} is not a queue name (1-128 of A-Z a-z 0-9 _ . : -)")
    return text


def parse_text_filter(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "")
    if len(value) > MAX_FILTER_LENGTH or "\x00" in value:
        raise HTTPException(400, f"the {name} filter must be at most {MAX_FILTER_LENGTH} characters, "
                                 "without NUL")
    return value or None


def parse_filter(request: Request) -> reads.JobFilter:
    """The queue page's filters from its query string; 400 for any malformed one."""
    known = {"state", "key", "error", "before", "meta"}
    if unknown := sorted(set(request.query_params) - known):
        raise HTTPException(400, f"unknown query parameter {unknown[0]!r} "
                                 f"(known: {', '.join(sorted(known))})")
    state = request.query_params.get("state", "") or None
    if state is not None and state not in reads.JOB_STATES:
        raise HTTPException(400, f"state {state[:40]!r} is not one of {', '.join(reads.JOB_STATES)}")
    before_text = request.query_params.get("before", "")
    before = parse_id(before_text, "before") if before_text else None
    return reads.JobFilter(state=state, key=parse_text_filter(request, "key"),
                           error=parse_text_filter(request, "error"), before=before,
                           meta=parse_meta_filter(request))


def parse_meta_filter(request: Request) -> str | None:
    """The meta filter: a JSON object (jobs whose meta contains it, ``@>``); 400 otherwise."""
    text = parse_text_filter(request, "meta")
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise HTTPException(400, 'the meta filter must be a JSON object, e.g. {"tenant": "acme"}') from None
    if not isinstance(value, dict):
        raise HTTPException(400, f"the meta filter must be a JSON object, got {type(value).__name__}")
    return text


async def overview(request: Request) -> Response:
    """``/``: every queue's counts and limits, and the last hour's throughput."""
    async with connection(request) as conn:
        queues = await reads.overview(conn)
        _, series = await reads.throughput(conn)
    return render(request, "overview.html",
                  {"title": "Queues", "queues": queues, "chart": chart.build(series)})


async def queue(request: Request) -> Response:
    """``/queues/{queue}``: the queue's counts and its jobs, newest first, filtered and paged by id."""
    name = parse_queue(request.path_params["queue"])
    where = parse_filter(request)
    async with connection(request) as conn:
        stats = await reads.queue_stats(conn, name)
        if stats is None:
            raise HTTPException(404, f"no queue named {name!r}: no job, setting or history mentions it")
        page = await reads.jobs_page(conn, name, where)
        fair_keys = await reads.fair_keys(conn, name)
    return render(request, "queue.html", {
        "title": f"Queue {name}", "queue": name, "stats": stats, "jobs": page.rows, "where": where,
        "fair_keys": fair_keys,
        "states": reads.JOB_STATES, "searched_to": page.searched_to, "search_window": reads.SEARCH_WINDOW,
        "next_params": where.query_params(before=page.next_before) if page.next_before else None,
    })


async def job(request: Request) -> Response:
    """``/jobs/{id}``: everything jobq knows about one job, every recorded error included."""
    job_id = parse_id(request.path_params["job_id"])
    async with connection(request) as conn:
        row = await reads.job(conn, job_id)
    if row is None:
        raise HTTPException(404, f"no job {job_id}: it never existed or was pruned")
    return render(request, "job.html", {"title": f"Job {job_id}", "job": row})


async def schedules(request: Request) -> Response:
    """``/schedules``: periodic jobs with their next and last run."""
    async with connection(request) as conn:
        rows = await reads.schedules(conn)
    return render(request, "schedules.html", {"title": "Schedules", "schedules": rows})


async def workers(request: Request) -> Response:
    """``/workers``: the workers holding leases now."""
    async with connection(request) as conn:
        rows = await reads.workers(conn)
    return render(request, "workers.html", {"title": "Workers", "workers": rows})
