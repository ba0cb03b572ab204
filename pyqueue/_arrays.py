"""Array parameters written as PostgreSQL text literals (``{1,2,3}``).

A worker acknowledges a batch with ``jobq.complete_many(ids bigint[],
lease_tokens uuid[])``, a producer sends ``jobq.enqueue_many(queue,
payloads jsonb[])``: psycopg would adapt each Python list element by
element in Python (its ``ListDumper``), which costs more per job than the
rest of the call. Their array literal is one ``str.join`` instead; the
statement's casts (``%s::bigint[]``, ``%s::uuid[]``, ``%s::jsonb[]``) make
the server read it. The ids and tokens came from the database (ints and
UUIDs, whose text needs no quoting); JSON texts are quoted and escaped.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID


def bigints(values: Iterable[int]) -> str:
    """``{1,2,3}``: a bigint[] literal of job ids."""
    return "{" + ",".join(map(str, values)) + "}"


def uuids(values: Iterable[UUID]) -> str:
    """``{0e2c…,…}``: a uuid[] literal of lease tokens (32 hex digits each,
    one of the forms PostgreSQL's uuid input reads)."""
    return "{" + ",".join([value.hex for value in values]) + "}"


def texts(values: Iterable[str]) -> str:
    """``{"…","…"}``: an array literal of texts (e.g. JSON for a jsonb[]),
    each double-quoted with its backslashes and double quotes escaped."""
    return "{" + ",".join([_quoted(value) for value in values]) + "}"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
