"""asyncio twins of pyqueue's client calls and workers (psycopg AsyncConnection).

The SQL, the argument checks and the worker core are the sync API's own
(``pyqueue._queries``, ``pyqueue.worker``); only the I/O differs.

::

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await pyqueue.aio.enqueue(conn, "emails", {"to": "ada@example.com"})
        await conn.commit()

    async def send(job: pyqueue.aio.AsyncJob) -> None: ...

    await pyqueue.aio.listen(dsn, "emails", send)     # until SIGTERM / SIGINT / stop
"""

from __future__ import annotations

from pyqueue import _aioclient
from pyqueue._aioclient import *  # noqa: F403  (the async client calls: _aioclient.__all__)
from pyqueue.job import AsyncJob, AsyncTxJob
from pyqueue.worker.aio_listen import AsyncJobIterator, listen
from pyqueue.worker.aio_worker import AsyncHandler, AsyncWorker
from pyqueue.worker.in_transaction import AsyncTxHandler

__all__ = [
    "AsyncHandler",
    "AsyncJob",
    "AsyncJobIterator",
    "AsyncTxHandler",
    "AsyncTxJob",
    "AsyncWorker",
    "listen",
]
__all__ += _aioclient.__all__
