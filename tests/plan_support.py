"""Plans read from the server, never from timings: auto_explain, loaded in
the test's own session, reports the plan of every statement a jobq call runs
(nested ones included: the statements inside the PL/pgSQL functions, with the
plans those functions really use) as a NOTICE in JSON, with the rows each
node handled (no timing). The call runs in a transaction that is rolled back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

Conn = psycopg.Connection[tuple[Any, ...]]
Params = Sequence[object] | Mapping[str, object]  # a statement's arguments, by position or by name

AUTO_EXPLAIN = {
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_nested_statements": "on",
    "auto_explain.log_analyze": "on",  # the rows each node really handled
    "auto_explain.log_timing": "off",  # the shape is asserted, never the time
    "auto_explain.log_format": "json",
    "auto_explain.log_level": "notice",  # to the client, not the server log
    "client_min_messages": "notice",
}
SUBPLANS = ("InitPlan", "SubPlan")  # a node's children that are not its input


@dataclass
class Node:
    """One plan node: its type, the relation and index it reads, the rows it
    returned (over all loops), its input nodes and its subplans."""

    kind: str
    relation: str | None
    index: str | None
    rows: int  # per execution (the average over its loops)
    loops: int
    inputs: list[Node] = field(default_factory=list)
    subplans: list[Node] = field(default_factory=list)

    def walk(self) -> Iterator[Node]:
        """This node and every node below it, subplans included."""
        yield self
        for child in (*self.inputs, *self.subplans):
            yield from child.walk()

    def reads_without_limit(self) -> Iterator[Node]:
        """The scans that feed this node's input directly: below its inputs,
        not through a Limit (which stops reading) nor a subplan."""
        for child in self.inputs:
            if child.kind == "Limit":
                continue
            if "Scan" in child.kind and child.relation is not None:
                yield child
            yield from child.reads_without_limit()

    def __str__(self) -> str:
        on = self.index or self.relation
        return f"{self.kind}{f' on {on}' if on else ''} ({self.rows} rows)"


@dataclass
class Plan:
    """The plan of one statement a call ran: its text and its root node."""

    query: str
    root: Node

    def nodes(self) -> list[Node]:
        return list(self.root.walk())

    def scans_of(self, relation: str) -> list[Node]:
        return [n for n in self.nodes() if "Scan" in n.kind and n.relation == relation]

    def __str__(self) -> str:
        text = " ".join(line.split("--")[0].strip() for line in self.query.splitlines())
        return f"{text[:90]}: " + ", ".join(str(n) for n in self.nodes())


def node(raw: dict[str, Any]) -> Node:
    loops = int(raw.get("Actual Loops", 1) or 1)
    children = raw.get("Plans", [])
    return Node(
        kind=str(raw["Node Type"]),
        relation=raw.get("Relation Name"),
        index=raw.get("Index Name"),
        rows=int(raw.get("Actual Rows", 0)),
        loops=loops,
        inputs=[node(c) for c in children if c.get("Parent Relationship") not in SUBPLANS],
        subplans=[node(c) for c in children if c.get("Parent Relationship") in SUBPLANS],
    )


def plans_of(conn: Conn, statements: Sequence[tuple[str, Params]]) -> list[Plan]:
    """The plans of every statement run by the last of ``statements`` (the
    others prepare it: a claim whose leases the last one acknowledges),
    all run in one transaction that is rolled back."""
    notices: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            notices.append(diag.message_primary)

    with conn.transaction(force_rollback=True):
        *setup, (last, params) = statements
        for statement, args in setup:
            conn.execute(statement, args)
        conn.execute("LOAD 'auto_explain'")
        for name, value in AUTO_EXPLAIN.items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        conn.add_notice_handler(keep)
        try:
            conn.execute(last, params).fetchall()
        finally:
            conn.remove_notice_handler(keep)
    found = []
    for message in notices:
        body = json.loads(message.partition("plan:")[2])
        found.append(Plan(query=str(body.get("Query Text", "")), root=node(body["Plan"])))
    return found


def describe(plans: Sequence[Plan]) -> str:
    """Every plan on a line of its own, for an assertion's message."""
    return "\n".join(str(p) for p in plans)
