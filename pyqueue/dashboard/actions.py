"""The dashboard's actions (POST forms) and its login form.

Every action calls one of jobq's operator functions — through pyqueue's
client calls (``pyqueue.aio``) where one exists, ``jobq.run_now`` directly —
and never writes a table itself. Before anything runs, read-only mode and the
CSRF token are checked (403 and nothing changed otherwise). The outcome, or a
jobq error (JQ… SQLSTATE) or a refused privilege, is shown in ``#flash`` on
the page the browser is sent back to (303).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from pyqueue import aio
from pyqueue.dashboard import reads
from pyqueue.dashboard.database import connection
from pyqueue.dashboard.pages import parse_id, parse_queue
from pyqueue.dashboard.rendering import path_to, render, set_flash
from pyqueue.dashboard.security import CSRF_FIELD, SESSION_COOKIE, cookie_path, csrf_ok
from pyqueue.errors import JobqError, translate_errors

MAX_BULK = 500  # jobs one bulk action may name
Outcome = tuple[str, bool]  # the flash text, and whether it reports an error
AsyncConnection = psycopg.AsyncConnection[Any]


async def checked_form(request: Request) -> FormData:
    """The POSTed form, once read-only mode and the CSRF token allow it (403 otherwise)."""
    if request.app.state.settings.read_only:
        raise HTTPException(403, "this dashboard is read-only: no action is allowed")
    form = await request.form()
    token = form.get(CSRF_FIELD)
    if not await csrf_ok(request, token if isinstance(token, str) else None):
        raise HTTPException(403, "missing or invalid CSRF token: reload the page and try again")
    return form


Action = Callable[[AsyncConnection], Awaitable[Outcome]]


async def perform(request: Request, back: str, act: Action) -> Response:
    """Run act on a pooled connection and send the browser to back with its outcome."""
    try:
        async with connection(request) as conn:
            with translate_errors():
                text, error = await act(conn)
    except JobqError as exc:
        text, error = f"refused by jobq ({exc.sqlstate}): {exc.message}", True
    except psycopg.errors.InsufficientPrivilege as exc:
        text, error = f"not allowed for this dashboard's database login: {str(exc).strip()}", True
    response = RedirectResponse(back, status_code=303)
    set_flash(request, response, text, error=error)
    return response


async def was(conn: AsyncConnection, job_id: int) -> str:
    """How a job's state reads in a 'nothing done' message."""
    row = await reads.job_status(conn, job_id)
    return "unknown" if row is None else str(row["status"])


async def job_action(request: Request, verb: str) -> Response:
    job_id = parse_id(request.path_params["job_id"])
    await checked_form(request)

    async def act(conn: AsyncConnection) -> Outcome:
        if verb == "retry":
            done, said = await aio.retry(conn, job_id), "retried"
        elif verb == "cancel":
            done, said = await aio.cancel(conn, job_id), "cancelled"
        else:
            async with conn.cursor() as cur:
                await cur.execute("SELECT jobq.run_now(%s)", (job_id,))
                found = await cur.fetchone()
            done, said = bool(found and found[0]), "set to run now"
        if done:
            return f"job {job_id} {said}", False
        return f"job {job_id} was {await was(conn, job_id)}: nothing done", True

    return await perform(request, path_to(request, "job", job_id=job_id), act)


async def retry_job(request: Request) -> Response:
    """POST ``/jobs/{id}/retry``: jobq.retry."""
    return await job_action(request, "retry")


async def cancel_job(request: Request) -> Response:
    """POST ``/jobs/{id}/cancel``: jobq.cancel."""
    return await job_action(request, "cancel")


async def run_job_now(request: Request) -> Response:
    """POST ``/jobs/{id}/run-now``: jobq.run_now (a scheduled job becomes ready now)."""
    return await job_action(request, "run-now")


async def known_queue(request: Request) -> str:
    """The queue of the URL, once it is known to jobq (404 otherwise) and the form is allowed."""
    name = parse_queue(request.path_params["queue"])
    async with connection(request) as conn:
        if await reads.queue_stats(conn, name) is None:
            raise HTTPException(404, f"no queue named {name!r}")
    return name


async def queue_action(request: Request, verb: str) -> Response:
    name = parse_queue(request.path_params["queue"])
    await checked_form(request)
    await known_queue(request)

    async def act(conn: AsyncConnection) -> Outcome:
        if verb == "pause":
            done = await aio.pause(conn, name)
            return (f"queue {name} paused", False) if done else (
                f"queue {name} was already paused: nothing done", True)
        if verb == "resume":
            done = await aio.resume(conn, name)
            return (f"queue {name} resumed", False) if done else (
                f"queue {name} was not paused: nothing done", True)
        count = await aio.retry_dead(conn, name)
        if count:
            return f"queue {name}: {count} dead job{'s' if count != 1 else ''} retried", False
        return f"queue {name} had no dead job: nothing done", True

    return await perform(request, path_to(request, "queue", queue=name), act)


async def pause_queue(request: Request) -> Response:
    """POST ``/queues/{queue}/pause``: jobq.pause."""
    return await queue_action(request, "pause")


async def resume_queue(request: Request) -> Response:
    """POST ``/queues/{queue}/resume``: jobq.resume."""
    return await queue_action(request, "resume")


async def retry_dead(request: Request) -> Response:
    """POST ``/queues/{queue}/retry-dead``: jobq.retry_dead."""
    return await queue_action(request, "retry-dead")


async def bulk(request: Request) -> Response:
    """POST ``/queues/{queue}/bulk``: retry or cancel the selected jobs
    (fields ``action`` and ``ids``), one jobq.retry / jobq.cancel each; jobs
    of another queue are left alone."""
    name = parse_queue(request.path_params["queue"])
    form = await checked_form(request)
    action = form.get("action")
    if action not in ("retry", "cancel"):
        raise HTTPException(400, "action must be retry or cancel")
    texts = [value for value in form.getlist("ids") if isinstance(value, str)]
    if len(texts) > MAX_BULK:
        raise HTTPException(400, f"at most {MAX_BULK} jobs per bulk action")
    ids = sorted({parse_id(text) for text in texts})
    await known_queue(request)

    async def act(conn: AsyncConnection) -> Outcome:
        if not ids:
            return "no job selected: nothing done", True
        done, skipped = [], []
        for job_id in ids:
            row = await reads.job_status(conn, job_id)
            if row is None or row["queue"] != name:
                skipped.append(job_id)
            elif await (aio.retry(conn, job_id) if action == "retry" else aio.cancel(conn, job_id)):
                done.append(job_id)
            else:
                skipped.append(job_id)
        said = "retried" if action == "retry" else "cancelled"
        text = f"{len(done)} of {len(ids)} job{'s' if len(ids) != 1 else ''} {said}"
        if skipped:
            more = " …" if len(skipped) > 20 else ""
            text += f"; nothing done for {', '.join(map(str, skipped[:20]))}{more}"
        return text, not done

    return await perform(request, path_to(request, "queue", queue=name), act)


async def login(request: Request) -> Response:
    """GET shows the token form; POST checks the token (and the CSRF token)
    and sets the HttpOnly, SameSite=Strict session cookie."""
    authenticator = request.app.state.authenticator
    if not request.app.state.settings.token_login:
        raise HTTPException(404, "this dashboard has no login form")
    if request.method == "GET":
        return render(request, "login.html", {"title": "Log in", "failed": False})
    form = await request.form()
    token, csrf = form.get("token"), form.get(CSRF_FIELD)
    if not await csrf_ok(request, csrf if isinstance(csrf, str) else None):
        raise HTTPException(403, "missing or invalid CSRF token: reload the page and try again")
    if not isinstance(token, str) or not authenticator.token_matches(token):
        return render(request, "login.html", {"title": "Log in", "failed": True}, status_code=401)
    response = RedirectResponse(path_to(request, "overview"), status_code=303)
    response.set_cookie(SESSION_COOKIE, request.app.state.signer.session_value(token), httponly=True,
                        samesite="strict", path=cookie_path(request), secure=request.url.scheme == "https")
    return response
