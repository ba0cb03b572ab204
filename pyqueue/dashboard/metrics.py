"""``GET /metrics`` on the dashboard: jobq's metrics in the Prometheus text
format, read from ``jobq.metrics()`` at each scrape on the app's own pool
(so every dashboard process serving it agrees with the database).

As for a worker's metrics (``pyqueue.metrics.database``): the scrape waits
at most ``SCRAPE_TIMEOUT`` seconds for a pooled connection and the query
together (the query also runs under that ``statement_timeout``), and a
database that cannot be read answers 200 with ``jobq_up 0`` and no
``jobq_*`` series rather than an error page, the error logged.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import psycopg
import psycopg_pool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from pyqueue.dashboard.database import connection

log = logging.getLogger("pyqueue.dashboard")
SCRAPE_TIMEOUT = 5.0  # seconds a scrape waits for the database: a pooled connection, then jobq.metrics()


async def read_metrics(request: Request, query: str, set_timeout: str) -> list[Any]:
    """The rows of ``query`` (jobq.metrics()) under the scrape's statement timeout."""
    async with connection(request) as conn, conn.transaction():
        await conn.execute(set_timeout, (f"{math.ceil(SCRAPE_TIMEOUT * 1000)}ms",))
        cursor = await conn.execute(query)
        rows: list[Any] = await cursor.fetchall()
        return rows


async def metrics_endpoint(request: Request) -> Response:
    """The Prometheus text of jobq's metrics (prometheus-client's content type)."""
    try:  # the metrics role package, imported where it is used
        from prometheus_client import CONTENT_TYPE_LATEST  # noqa: PLC0415

        from pyqueue.metrics.database import SET_TIMEOUT  # noqa: PLC0415
        from pyqueue.metrics.families import QUERY, exposition, families, up  # noqa: PLC0415
    except ImportError as error:
        detail = f"/metrics needs prometheus-client: pip install 'jobq[dashboard]' ({error})"
        raise HTTPException(503, detail) from error
    try:
        rows = await asyncio.wait_for(read_metrics(request, QUERY, SET_TIMEOUT), SCRAPE_TIMEOUT)
    except (psycopg.Error, psycopg_pool.PoolTimeout, asyncio.TimeoutError) as error:
        log.warning("/metrics: cannot read jobq.metrics() (answering jobq_up 0): %s",
                    str(error).strip() or type(error).__name__)
        metrics = [up(False)]
    else:
        metrics = [*families(rows), up(True)]
    return Response(exposition(metrics), media_type=CONTENT_TYPE_LATEST)
