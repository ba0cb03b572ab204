"""Checks of Python arguments before they reach the database.

jobq's SQL checks every argument itself and stays the truth about ranges
and rules (queue-name syntax, priority range, payload size cap...). These
checks only catch what Python or psycopg would otherwise mangle on the way:
the wrong type (bools and floats are not integers), integers outside the
SQL type's range, NaN and infinity, NUL characters and lone surrogates in
text, durations and times that are not finite. Each raises the typed error
whose SQLSTATE the server would use for that argument, with a message that
names it and a hint, before anything is sent; None passes through so that
the SQL's own NULL rules apply.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, SupportsIndex, cast
from uuid import UUID

from psycopg.types.json import Jsonb

from pyqueue import _arrays as arrays
from pyqueue.errors import (
    InvalidArgument,
    InvalidBatchSize,
    InvalidPayload,
    InvalidQueueName,
    InvalidTime,
    MissingLease,
)

INT16 = 16
INT32 = 32
INT64 = 64
# A delay is added to now() in the database: beyond this the sum is not a
# timestamp PostgreSQL can hold (jobq itself refuses far less).
MAX_DELAY = timedelta(days=100_000 * 365)
# "\u0000" escapes in JSON text that stand for a NUL (not an escaped backslash
# followed by "u0000").
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def refuse(error: type[InvalidArgument], message: str, hint: str) -> InvalidArgument:
    return error(f"jobq: {message}", hint=hint)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def integer(
    value: object, name: str, error: type[InvalidArgument], bits: int = INT32, *, hint: str | None = None
) -> int | None:
    """An integer argument of a SQL integer type of ``bits`` bits (None passes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise refuse(error, f"{name} must be an integer, got {type(value).__name__} {_shown(value)}",
                     hint or f"Pass {name} as an int (bools and floats are not integers).")
    number = operator.index(cast(SupportsIndex, value))
    bound = 2 ** (bits - 1)
    if not -bound <= number < bound:
        raise refuse(error, f"{name} {number} is out of range",
                     hint or f"{name} must fit in a {bits}-bit integer ({-bound}..{bound - 1}).")
    return number


def text(value: object, name: str, error: type[InvalidArgument]) -> str | None:
    """A text argument: a str without NUL characters or lone surrogates (None passes)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise refuse(error, f"{name} must be a string, got {type(value).__name__} {_shown(value)}",
                     f"Pass {name} as a str.")
    _check_characters(value, name, error)
    return value


def _check_characters(value: str, name: str, error: type[InvalidArgument]) -> None:
    if "\x00" in value:
        raise refuse(error, f"{name} contains a NUL character (\\x00) at index {value.index(chr(0))}",
                     "PostgreSQL text cannot hold NUL characters: remove them or encode the data "
                     "(e.g. base64).")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise refuse(error, f"{name} contains a lone surrogate ({value[exc.start]!r}) at index {exc.start}",
                     "Only valid Unicode can be stored: decode bytes with errors='replace' or fix the "
                     "source of the string.") from None


def texts(
    values: Sequence[object] | None, name: str, error: type[InvalidArgument]
) -> list[str | None] | None:
    """A text[] argument: each element as :func:`text` checks it, named ``name[i]`` (1-based)."""
    if values is None:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise refuse(error, f"{name} must be a list of strings, got {type(values).__name__}",
                     f"Pass {name} as a list.")
    return [text(value, f"{name}[{i}]", error) for i, value in enumerate(values, start=1)]


def job_ids(values: object, name: str, error: type[InvalidArgument]) -> list[int | None] | None:
    """A bigint[] of job ids (depends_on, members): each element an int of the
    bigint range, named ``name[i]`` (1-based); None passes, and so do None
    elements (the SQL refuses them with its own error)."""
    if values is None:
        return None
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise refuse(error, f"{name} must be a list of job ids, got {type(values).__name__} {_shown(values)}",
                     f"Pass {name} as a list of the ids enqueue() returned.")
    return [integer(value, f"{name}[{i}]", error, INT64, hint=f"Pass {name} as a list of job ids (int).")
            for i, value in enumerate(values, start=1)]


def queues(value: object, error: type[InvalidArgument]) -> str | list[str | None] | None:
    """One queue name (text) or several (text[]), as claim() takes them."""
    if value is None or isinstance(value, str):
        return text(value, "queue", error)
    if not isinstance(value, Sequence):
        raise refuse(error, f"queue must be a queue name or a list of them, got {type(value).__name__}",
                     "Pass a str, or a list of str to claim from several queues.")
    return texts(value, "queues", error)


def payload(value: object, name: str = "payload", error: type[InvalidArgument] = InvalidPayload) -> Jsonb:
    """A payload (or other JSON argument) as the JSON text that goes to the
    database (SQL checks that it is an object and within its queue's size cap)."""
    encoded = _plain_json(value)
    if encoded is None:
        encoded = _checked_json(value, name, error)
    return Jsonb(encoded, dumps=_as_is)


def _checked_json(value: object, name: str, error: type[InvalidArgument]) -> str:
    """``value``'s JSON text, or the error that says what is wrong with it."""
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        raise refuse(error, f"{name} is nested too deeply for Python's json module",
                     "Flatten the payload (PostgreSQL's jsonb allows deeper nesting from SQL).") from None
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        if "float" in reason:
            reason = "NaN and Infinity are not JSON numbers"
        raise refuse(error, f"{name} cannot be sent as JSON: {reason}",
                     "A payload holds dicts with str keys, lists, str, int, finite float, bool and None; "
                     "convert other values (e.g. datetime.isoformat(), str(uuid)) first.") from None
    _check_keys(value, name, error)
    if "\\u0000" in encoded and (found := _JSON_NUL.search(encoded)):
        raise refuse(error, f"{name} contains a NUL character (\\u0000) after "
                     f"{_before(encoded, found.start())!r}",
                     "PostgreSQL's jsonb cannot hold \\u0000 in strings: remove it or encode the data "
                     "(e.g. base64).")
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise refuse(error, f"{name} contains a lone surrogate ({encoded[exc.start]!r}) after "
                     f"{_before(encoded, exc.start)!r}",
                     "Only valid Unicode can be stored: decode bytes with errors='replace' or fix the "
                     "source of the string.") from None
    return encoded


def _unserialisable(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _fast_encoder() -> Callable[[object, int], Sequence[str]] | None:
    """The C encoder json.dumps makes for each call (with its arguments above),
    made once: no circular check, so a circular value ends in RecursionError
    and goes the careful way. None where json has no C encoder."""
    try:
        return json.encoder.c_make_encoder(  # type: ignore[no-any-return, attr-defined]
            None, _unserialisable, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    except (AttributeError, TypeError):
        return None


_FAST_ENCODE = _fast_encoder()
_CONTAINERS = (dict, list, tuple)


def _plain_json(value: object) -> str | None:
    """The JSON text of a plain payload (a dict of dicts, lists, str, int,
    finite float, bool and None, str keys only, no NUL, valid Unicode), the
    same text :func:`_checked_json` makes; None for anything else or any
    doubt (the careful path then encodes it or says what is wrong)."""
    if _FAST_ENCODE is None or type(value) is not dict:
        return None
    try:
        encoded = "".join(_FAST_ENCODE(value, 0))
    except (TypeError, ValueError, RecursionError):
        return None
    if not _plain_keys(value):  # after the encoding: a value it encoded has no cycle to walk round
        return None
    if "\\u0000" in encoded or (not encoded.isascii() and not _valid_unicode(encoded)):
        return None
    return encoded


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _plain_keys(value: dict[Any, Any]) -> bool:
    """Whether every key is a str, and every container a plain dict, list or
    tuple (their subclasses go the careful way, as does a non-str key)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            children = item.values()
        elif kind is list or kind is tuple:
            children = item
        else:
            return False
        for child in children:
            if type(child) in _CONTAINERS:
                stack.append(child)
            elif isinstance(child, _CONTAINERS):
                return False
    return True


def _before(encoded: str, end: int) -> str:
    """Up to 40 characters of JSON text before a position, to locate a bad character."""
    return encoded[max(0, end - 40):end]


def payloads(values: object, name: str = "payloads") -> list[Jsonb]:
    _check_payload_list(values, name)
    assert isinstance(values, Sequence)
    return [payload(value, f"{name}[{i}]") for i, value in enumerate(values, start=1)]


def payloads_array(values: object, name: str = "payloads") -> str:
    """The payloads of enqueue_many as one jsonb[] literal, checked as
    :func:`payloads` checks them (the same errors, naming ``payloads[i]``).
    psycopg would adapt a list of payloads element by element in Python,
    which costs more than the rest of the call; this is one join."""
    _check_payload_list(values, name)
    assert isinstance(values, Sequence)
    texts = []
    for i, value in enumerate(values, start=1):
        encoded = _plain_json(value)
        texts.append(_checked_json(value, f"{name}[{i}]", InvalidPayload) if encoded is None else encoded)
    return arrays.texts(texts)


def _check_payload_list(values: object, name: str) -> None:
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
        raise refuse(InvalidPayload, f"{name} must be a list of payloads, got {type(values).__name__}",
                     "Pass a list of dicts, one per job.")


def _as_is(encoded: Any) -> str:
    return str(encoded)


def _check_keys(value: object, name: str, error: type[InvalidArgument]) -> None:
    """Object keys must be str: json would turn 1, True or None into "1", "true", "null"."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise refuse(error, f"{name} has a key that is not a string: {_shown(key)}",
                                 "JSON object keys are strings and json would silently change this one "
                                 "(1 -> \"1\", True -> \"true\"): convert it yourself, e.g. str(key).")
                stack.append(child)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def lease_token(value: object, name: str = "lease_token") -> UUID | None:
    """A lease token: a UUID (or its text), else MissingLease (JQ010)."""
    if value is None or isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise refuse(MissingLease, f"{name} is not a UUID: {_shown(value)}",
                 "Pass the job's lease_token exactly as claim() returned it.")


def job_id(value: object, name: str = "id") -> int | None:
    """A job id (bigint); jobq's error for a bad id is MissingLease (JQ010)."""
    return integer(value, name, MissingLease, INT64,
                   hint="Pass the job's id as claim() or enqueue() returned it.")


def seconds(value: object, name: str, error: type[InvalidArgument]) -> timedelta | None:
    """A duration: a timedelta, or a finite number of seconds (None passes)."""
    if value is None or isinstance(value, timedelta):
        return value
    example = f"For example {name}=timedelta(minutes=5) or {name}=300."
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = f"{type(value).__name__} {_shown(value)}"
        raise refuse(error, f"{name} must be a timedelta or a number of seconds, got {kind}", example)
    if not math.isfinite(value):
        raise refuse(error, f"{name} must be a finite number of seconds, got {value!r}", example)
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise refuse(error, f"{name} of {value!r} seconds is too long to be a duration", example) from None


def delay(value: object, name: str = "delay") -> timedelta | None:
    """A delay from now: a non-negative duration (run_at is for any other time)."""
    duration = seconds(value, name, InvalidTime)
    if duration is None:
        return None
    if duration < timedelta(0):
        raise refuse(InvalidTime, f"{name} must not be negative, got {duration}",
                     f"Pass {name}=0 to run now, or run_at= for a time in the past.")
    if duration > MAX_DELAY:
        raise refuse(InvalidTime, f"{name} of {duration.days} days is beyond any time PostgreSQL can hold",
                     "Pass a shorter delay (jobq accepts run times within 10 years).")
    return duration


def moment(value: object, name: str) -> datetime | None:
    """A point in time: a timezone-aware datetime (None passes)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise refuse(InvalidTime, f"{name} must be a datetime, got {type(value).__name__} {_shown(value)}",
                     "Pass a timezone-aware datetime, e.g. datetime.now(timezone.utc) + timedelta(hours=1).")
    if value.tzinfo is None or value.utcoffset() is None:
        raise refuse(InvalidTime, f"{name} must be timezone-aware, got {value.isoformat()}",
                     "Attach a time zone, e.g. datetime.now(timezone.utc) or value.replace(tzinfo=...).")
    return value


def real(value: object, name: str, error: type[InvalidArgument]) -> float | None:
    """A double precision argument: an int or a finite float, not a bool (None passes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise refuse(error, f"{name} must be a number, got {type(value).__name__} {_shown(value)}",
                     f"Pass {name} as a float.")
    if not math.isfinite(value):
        raise refuse(error, f"{name} must be a finite number, got {value!r}",
                     f"Pass {name} as a finite float.")
    return float(value)


def batch_size(n: object, name: str = "n") -> int | None:
    """A batch size (claim, take, reap): an int of the SQL integer range."""
    return integer(n, name, InvalidBatchSize)


def queue_name(queue: object) -> str | None:
    return text(queue, "queue", InvalidQueueName)
