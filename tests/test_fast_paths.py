"""The cheap paths of the client and the worker (issue 24) say exactly what
the careful ones say: a plain payload's JSON is json.dumps' text and
anything doubtful goes the careful way (its errors unchanged); the array
literals that replace psycopg's per-element adaptation reach the server as
the same values; a claim's payloads are decoded in one ``json.loads`` per
batch, one by one only when that fails (a payload too deep for Python);
and a claimed job is the job the dataclass constructor makes. Their speed
is measured by ``python -m pyqueue.bench.python_side``, not here."""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import _arrays as arrays
from pyqueue import _checks as check
from pyqueue import _db
from pyqueue import _queries as q
from pyqueue.errors import InvalidPayload
from pyqueue.job import Job

Conn = psycopg.Connection[tuple[object, ...]]

PLAIN: list[dict[str, Any]] = [  # plain payloads: the cheap path encodes them, as json.dumps would
    {},
    {"n": 1, "kind": "bench"},
    {"quote": 'say "hi"', "backslash": "C:\\temp\\new", "both": '\\"', "brace": "{a,b}", "comma": "a, b"},
    {"unicode": "é ü ß 漢字 🎉", "control": "\x01\x1f\t\n", "empty": "", "null_word": "NULL"},
    {"numbers": [0, -1, 2**70, -(2**63), 1.5, -0.0, 1e308, 5e-324], "bools": [True, False, None]},
    {"nested": {"list": [{"a": [1, {"b": ["c", ("tuple", 2)]}]}], "deep": {"x": {"y": {"z": {}}}}}},
]
DOUBTFUL: list[object] = [  # the cheap path declines them; the careful path decides
    {"escaped_nul_text": "\\u0000 is six characters, not a NUL"},
    OrderedDict(a=1),
    {"inner": OrderedDict(b=2)},
    {1: "int key"},
    {"inner": {None: "None key"}},
    {"nan": float("nan")},
    {"when": object()},
    {"nul": "a\x00b"},
    {"surrogate": "\udc80"},
]


def careful(value: object) -> str:
    return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("value", PLAIN, ids=range(len(PLAIN)))
def test_a_plain_payload_is_encoded_as_json_dumps_encodes_it(value: dict[str, Any]) -> None:
    assert check._plain_json(value) == careful(value)
    assert check.payload(value).obj == careful(value)


@pytest.mark.parametrize("value", DOUBTFUL, ids=range(len(DOUBTFUL)))
def test_a_doubtful_payload_goes_the_careful_way(value: object) -> None:
    assert check._plain_json(value) is None


def test_the_careful_way_still_takes_what_is_valid() -> None:
    for value in (DOUBTFUL[0], DOUBTFUL[1], DOUBTFUL[2]):
        assert check.payload(value).obj == careful(value)


def test_a_cyclic_payload_is_refused_as_before_and_does_not_hang() -> None:
    cycle: dict[str, Any] = {"self": []}
    cycle["self"].append(cycle)
    with pytest.raises(InvalidPayload, match=r"payloads\[2\] cannot be sent as JSON: Circular reference"):
        check.payloads_array([{"ok": 1}, cycle])


@pytest.mark.parametrize(("values", "message"), [
    ([{"a": 1}, {"a": 1, 2: "b"}], r"payloads\[2\] has a key that is not a string: 2"),
    ([{"a": OrderedDict(b=object())}], r"payloads\[1\] cannot be sent as JSON: Object of type object"),
    ([{"a": 1}, {"a": 1}, {"n": float("inf")}], r"payloads\[3\] cannot be sent as JSON: NaN and Infinity"),
    ([{"s": "x\x00y"}], r"payloads\[1\] contains a NUL character"),
    ({"a": 1}, r"payloads must be a list of payloads, got dict"),
])
def test_the_array_of_payloads_refuses_what_the_list_refused(values: object, message: str) -> None:
    with pytest.raises(InvalidPayload, match=message):
        check.payloads(values)
    with pytest.raises(InvalidPayload, match=message):
        check.payloads_array(values)


def test_the_payloads_array_reaches_the_server_as_the_same_values(conn: Conn) -> None:
    payloads: list[dict[str, Any]] = [*PLAIN, OrderedDict(kept="in order"), {"inner": OrderedDict(b=2)}]
    unnest = "SELECT v::text FROM unnest(%s::jsonb[]) WITH ORDINALITY AS u(v, i) ORDER BY i"
    literal = conn.execute(unnest, (check.payloads_array(payloads),)).fetchall()
    adapted = conn.execute(unnest, (check.payloads(payloads),)).fetchall()  # psycopg's list of Jsonb
    assert literal == adapted and len(literal) == len(payloads)


def test_enqueue_many_stores_hostile_but_valid_payloads_as_given(conn: Conn) -> None:
    ids = pyqueue.enqueue_many(conn, "fast", PLAIN)
    same = ("SELECT j.payload = e.expected FROM unnest(%s::bigint[], %s::jsonb[]) AS e(id, expected) "
            "JOIN jobq.jobs AS j USING (id)")
    rows = conn.execute(same, (ids, check.payloads(PLAIN))).fetchall()
    assert rows == [(True,)] * len(PLAIN)


def test_id_and_token_arrays_reach_the_server_as_the_same_values(conn: Conn) -> None:
    ids = [1, 2**62, 42]
    tokens = [uuid.uuid4() for _ in ids]
    row = conn.execute("SELECT %s::bigint[], %s::uuid[], %s::bigint[]",
                       (arrays.bigints(ids), arrays.uuids(tokens), arrays.bigints([]))).fetchone()
    assert row == (ids, tokens, [])


# --- the claim ---------------------------------------------------------------------

def counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count json.loads calls (their text lengths) while the test runs."""
    calls: list[int] = []
    loads = json.loads

    def counted(text: str | bytes, **kwargs: Any) -> Any:
        calls.append(len(text))
        return loads(text, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    return calls


def test_a_claim_decodes_its_payloads_in_one_call(conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = pyqueue.enqueue_many(conn, "fast", PLAIN)
    # What psycopg's jsonb loader makes of them, one json.loads each.
    loaded = conn.execute("SELECT payload FROM jobq.jobs WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
    calls = counting_loads(monkeypatch)
    jobs = pyqueue.claim(conn, "fast", 100)
    assert len(calls) == 1, calls
    assert [job.payload for job in sorted(jobs, key=lambda job: job.id)] == [row[0] for row in loaded]


def deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def test_a_payload_too_deep_for_python_is_decoded_alone_and_marked() -> None:
    texts = ['{"n":1}', deep(100_000), '{"n":3}']
    values, undecodable = _db.load_json_texts(texts)
    assert undecodable is True
    assert values[0] == {"n": 1} and values[2] == {"n": 3}
    assert _db.undecodable(values[1]) is not None and "RecursionError" in str(_db.undecodable(values[1]))
    assert _db.load_json_texts(['{"n":1}', None, "[2]"]) == ([{"n": 1}, None, [2]], False)


def test_a_claimed_job_is_the_job_its_constructor_makes(conn: Conn) -> None:
    pyqueue.enqueue(conn, "fast", {"n": 1}, key="k", group_key="g")
    query, params = q.claim_query("fast", 1, "w", None)
    claimed = _db.claimed_rows(conn, query, params)
    connect: Any = object()
    [job] = Job._from_claim(claimed, lambda: connect)
    row = dict(zip(claimed.names, [column[0] for column in claimed.columns], strict=True))
    built = Job(**{name: row[name] for name in asdict(job)})
    assert job == built and (job.job_key, job.group_key, job.payload) == ("k", "g", {"n": 1})
    lease_seconds = float(row["lease_seconds"])
    assert vars(job) == {**vars(built), "_lease_seconds": lease_seconds, "_connect": job._connect}
    assert job._connection() is connect


@dataclass
class SharedStateJob(Job):
    def __post_init__(self) -> None:
        super().__post_init__()
        self._notes: list[str] = []  # mutable: would be one list shared by every claimed job


def test_a_mutable_initial_state_is_refused_rather_than_shared(conn: Conn) -> None:
    pyqueue.enqueue(conn, "fast", {"n": 1})
    query, params = q.claim_query("fast", 1, "w", None)
    claimed = _db.claimed_rows(conn, query, params)
    make: Callable[..., list[SharedStateJob]] = SharedStateJob._from_claim
    with pytest.raises(TypeError, match=r"SharedStateJob\._notes starts as a list"):
        make(claimed, lambda: None)
