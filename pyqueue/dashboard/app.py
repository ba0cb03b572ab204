"""The dashboard as an ASGI application: :func:`create_app` builds the
Starlette app (routes, security middleware, error pages, the pool's
lifespan) that ``pyqueue dashboard`` serves and users may mount in their own
Starlette or FastAPI app::

    from pyqueue.dashboard import create_app
    app.mount("/jobq", create_app(dsn, read_only=True))

A mounted app's lifespan does not run under every framework; the pool then
opens with the first request (close it with
``await dashboard.state.database.close()`` in the host app's shutdown, or
let the process end).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import psycopg
import psycopg_pool
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pyqueue._db import HAS_VERSION, ascalar, located
from pyqueue._sqlfiles import SqlScripts, version_key
from pyqueue.dashboard import actions, pages
from pyqueue.dashboard.database import Database, connection
from pyqueue.dashboard.metrics import metrics_endpoint
from pyqueue.dashboard.rendering import STATIC, error_page, make_environment
from pyqueue.dashboard.security import (
    Auth,
    Authenticator,
    SecurityMiddleware,
    Signer,
    TokenAuth,
)
from pyqueue.dashboard.slashes import SlashRedirect
from pyqueue.errors import JobqError, JobqNotInstalled, JobqOutdated, missing_jobq
from pyqueue.worker.scripts import read_only_server

log = logging.getLogger("pyqueue.dashboard")
REFRESH_SECONDS = 5.0  # how often the pages re-fetch themselves
MIN_REFRESH_SECONDS = 1.0
TITLES = {400: "Bad request", 401: "Authentication required", 403: "Forbidden", 404: "Not found",
          405: "Method not allowed", 503: "Database unavailable"}


@dataclass(frozen=True)
class Settings:
    """What the pages and actions need to know about this dashboard."""

    read_only: bool
    refresh_seconds: float
    token_login: bool  # token auth: the login form exists


# A small SVG icon, so that a browser's icon request is answered, not a 404.
FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
           '<rect width="16" height="16" rx="3" fill="#2457c5"/>'
           '<path d="M4 4h8M4 8h8M4 12h5" stroke="#fff" stroke-width="2"/></svg>')


async def favicon(request: Request) -> Response:
    """The dashboard's icon (linked from every page; /favicon.ico too)."""
    return Response(FAVICON, media_type="image/svg+xml", headers={"cache-control": "max-age=86400"})


def routes() -> list[BaseRoute]:
    """Every route: the pages, the actions, the login form, ``/metrics``
    (Prometheus text, pyqueue.dashboard.metrics) and the static assets."""
    found: list[BaseRoute] = [
        Route("/", pages.overview, name="overview"),
        Route("/queues/{queue}", pages.queue, name="queue"),
        Route("/queues/{queue}/pause", actions.pause_queue, methods=["POST"], name="pause"),
        Route("/queues/{queue}/resume", actions.resume_queue, methods=["POST"], name="resume"),
        Route("/queues/{queue}/retry-dead", actions.retry_dead, methods=["POST"], name="retry-dead"),
        Route("/queues/{queue}/bulk", actions.bulk, methods=["POST"], name="bulk"),
        Route("/jobs/{job_id}", pages.job, name="job"),
        Route("/jobs/{job_id}/retry", actions.retry_job, methods=["POST"], name="retry"),
        Route("/jobs/{job_id}/cancel", actions.cancel_job, methods=["POST"], name="cancel"),
        Route("/jobs/{job_id}/run-now", actions.run_job_now, methods=["POST"], name="run-now"),
        Route("/schedules", pages.schedules, name="schedules"),
        Route("/workers", pages.workers, name="workers"),
        Route("/login", actions.login, methods=["GET", "POST"], name="login"),
        Route("/metrics", metrics_endpoint, name="metrics"),
        Route("/favicon.ico", favicon, name="favicon"),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    return found


async def http_error(request: Request, exc: Exception) -> Response:
    """A 4xx/5xx raised on purpose (HTTPException): its page, with its message."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    response = error_page(request, exc.status_code, TITLES.get(exc.status_code, "Error"), str(exc.detail))
    response.headers.update(headers)
    return response


async def unexpected_error(request: Request, exc: Exception) -> Response:
    """Anything else: logged here (the traceback only for a real bug), a page
    without one for the browser. A lost connection is a 503; the pool then
    tests its idle connections and replaces the broken ones (a restarted
    server broke them all), so the next request gets a working one. So is a
    write refused by a server that takes none now (a standby after a
    failover, a fenced primary: ``read_only_server``); its connection was
    closed (``Database.connection``), the next one finds the new primary."""
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout) or read_only_server(exc):
        log.error("database unavailable for %s %s: %s", request.method, request.url.path, exc)
        if isinstance(exc, psycopg.OperationalError) or read_only_server(exc):
            database: Database = request.app.state.database
            await database.pool.check()
        return error_page(request, 503, TITLES[503], "the dashboard cannot reach PostgreSQL right now; "
                          "it tries again with the next request")
    if (page := await jobq_missing(request, exc)) is not None:
        return page
    log.exception("error serving %s %s", request.method, request.url.path)
    return error_page(request, 500, "Internal error",
                      "the dashboard failed to serve this page; the server log has the details")


async def jobq_missing(request: Request, exc: Exception) -> Response | None:
    """The page for a database without jobq, or with an older jobq than this
    pyqueue's (a 503 saying ``pyqueue install`` or ``pyqueue upgrade``); None
    for any other error."""
    found = exc if isinstance(exc, JobqNotInstalled | JobqOutdated) else (
        missing_jobq(exc) if isinstance(exc, psycopg.Error) else None)
    if isinstance(found, JobqNotInstalled):
        return missing_page(request, "jobq is not installed", found)
    # A missing jobq view, or any other failure (a column or a key the page
    # expects): an older jobq, when the database says so.
    try:
        async with connection(request) as conn:
            has_version = await ascalar(conn, HAS_VERSION)
            version = await ascalar(conn, "SELECT jobq.version()") if has_version else None
    except psycopg.Error:
        return None if found is None else missing_page(request, "jobq needs an upgrade", found)
    if isinstance(found, JobqOutdated):
        told = located(found, version)
        title = "jobq is not installed" if isinstance(told, JobqNotInstalled) else "jobq needs an upgrade"
        return missing_page(request, title, told)
    needed = SqlScripts.load().latest
    if version is None or version_key(str(version)) >= version_key(needed):
        return None  # jobq is current: a real error
    what = exc.diag.message_primary if isinstance(exc, psycopg.Error) else f"{type(exc).__name__}: {exc}"
    outdated = JobqOutdated(f"what this page reads ({what})", needed, str(version))
    return missing_page(request, "jobq needs an upgrade", outdated)


def missing_page(request: Request, title: str, error: JobqError) -> Response:
    log.error("%s %s: %s", request.method, request.url.path, error.message)
    return error_page(request, 503, title, f"{error.message}. {error.hint}")


class ErrorPages:
    """Turns an exception escaping a page or action into an error page
    (inside the security middleware, so it carries the same headers), before
    Starlette's outermost handler would print it as an unhandled error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            if started:  # too late for a page: the client sees a cut response
                raise
            page = await unexpected_error(Request(scope, receive), exc)
            await page(scope, receive, send)


def create_app(
    dsn: str,
    *,
    read_only: bool = False,
    auth: Auth | None = None,
    refresh_seconds: float = REFRESH_SECONDS,
    secret: bytes | None = None,
    pool_min_size: int = 1,
    pool_max_size: int = 4,
) -> Starlette:
    """The dashboard for the jobq database at dsn.

    ``read_only`` hides every action and refuses every POST (403).
    ``auth``: None (fine on loopback only — the CLI refuses otherwise), a
    :class:`~pyqueue.dashboard.security.TokenAuth` or a
    :class:`~pyqueue.dashboard.security.BasicAuth`. ``refresh_seconds``: how
    often pages refresh themselves (at least 1). ``secret`` signs CSRF tokens
    and cookies; give every process behind one address the same one (the
    default, random per app, suits a single process).
    """
    if not refresh_seconds >= MIN_REFRESH_SECONDS:
        raise ValueError(f"refresh_seconds must be at least {MIN_REFRESH_SECONDS}")
    if auth is not None and not isinstance(auth, Auth):
        raise TypeError("auth must be a TokenAuth, a BasicAuth or None")
    database = Database(dsn, min_size=pool_min_size, max_size=pool_max_size)
    signer = Signer(secret if secret is not None else secrets.token_bytes(32))
    authenticator = Authenticator(auth, signer)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await database.open()
        try:
            yield
        finally:
            await database.close()

    app = Starlette(
        routes=routes(),
        middleware=[Middleware(SecurityMiddleware, authenticator=authenticator), Middleware(ErrorPages)],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    # Trailing-slash redirects with a relative Location, never the client's Host (pyqueue.dashboard.slashes).
    app.router.redirect_slashes = False
    app.router.default = SlashRedirect(app.router)
    app.state.database = database
    app.state.pool = database.pool
    app.state.signer = signer
    app.state.authenticator = authenticator
    app.state.templates = make_environment()
    app.state.settings = Settings(read_only=read_only, refresh_seconds=refresh_seconds,
                                  token_login=isinstance(auth, TokenAuth))
    return app
