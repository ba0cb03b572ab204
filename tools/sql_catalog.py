"""What tools/sql_docs.py documents, read from a database where jobq is installed:
the functions, views and composite types of schema ``jobq`` from the catalog,
and, from the function bodies, which ``JQ`` SQLSTATEs each can raise.

Bodies are read with the PL/pgSQL lexer rules that matter here: comments are
dropped, and string literals (quoted or dollar-quoted) are neither calls nor
code, so ``-- jobq.x()`` or ``'SELECT jobq.x()'`` (a pg_cron command) is not a
call of ``jobq.x``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg

RAISES = re.compile(r"\bERRCODE\s*=\s*'(JQ\w{3})'|\bRAISE\s+(?:EXCEPTION\s+)?SQLSTATE\s+'(JQ\w{3})'", re.I)
ERRCODE_NOT_LITERAL = re.compile(r"\bERRCODE\s*=(?!\s*')", re.I)
CALL = re.compile(r"\bjobq\s*\.\s*([A-Za-z_]\w*)\s*\(")
DOLLAR_QUOTE = re.compile(r"\$([A-Za-z_]\w*)?\$")


@dataclass(frozen=True)
class Body:
    """A function body split by the PL/pgSQL lexer rules that matter here."""

    code: str  # without comments and string literals
    text: str  # without comments
    strings: tuple[str, ...]  # the string literals' contents


def split_body(source: str) -> Body:
    """The body's code, its text without comments, and its string literals."""
    code: list[str] = []
    text: list[str] = []
    strings: list[str] = []
    i, n = 0, len(source)
    while i < n:
        if source.startswith("--", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
            continue
        if source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end < 0 else end + 2
            code.append(" ")
            text.append(" ")
            continue
        quote = DOLLAR_QUOTE.match(source, i) if source[i] == "$" else None
        if source[i] == "'" or (quote and not (i and (source[i - 1].isalnum() or source[i - 1] == "_"))):
            if quote:
                end = source.find(quote.group(0), quote.end())
                stop = n if end < 0 else end + len(quote.group(0))
                strings.append(source[quote.end():end if end >= 0 else n])
            else:
                stop = _string_end(source, i)
                strings.append(source[i + 1:stop - 1].replace("''", "'"))
            text.append(source[i:stop])
            code.append("''")
            i = stop
            continue
        code.append(source[i])
        text.append(source[i])
        i += 1
    return Body("".join(code), "".join(text), tuple(strings))


def _string_end(source: str, start: int) -> int:
    """The index just past the quoted literal opening at ``start`` ('' and, in E'', backslash escapes)."""
    escapes = start > 0 and source[start - 1] in "eE" and not (
        start > 1 and (source[start - 2].isalnum() or source[start - 2] == "_"))
    j = start + 1
    while j < len(source):
        if (escapes and source[j] == "\\") or source.startswith("''", j):
            j += 2
        elif source[j] == "'":
            return j + 1
        else:
            j += 1
    return len(source)


@dataclass(frozen=True)
class Function:
    """One function of schema jobq, as the catalog describes it."""

    oid: int
    name: str
    identity: str  # pg_get_function_identity_arguments
    arguments: str  # pg_get_function_arguments: names, types, defaults
    result: str  # pg_get_function_result
    comment: str
    source: str
    definer: bool
    settings: tuple[str, ...]
    callers: tuple[str, ...]  # the jobq roles that may EXECUTE it

    @property
    def public(self) -> bool:
        return not self.name.startswith("_")

    @property
    def label(self) -> str:
        return f"jobq.{self.name}({self.identity})"

    @property
    def body(self) -> Body:
        return split_body(self.source)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    comment: str


@dataclass(frozen=True)
class Relation:
    """A view or a composite type of schema jobq."""

    name: str
    comment: str
    columns: tuple[Column, ...]
    readers: tuple[str, ...]  # the jobq roles that may SELECT it (views)

    @property
    def public(self) -> bool:
        return not self.name.startswith("_")


@dataclass(frozen=True)
class Catalog:
    version: str
    roles: tuple[str, ...]
    functions: tuple[Function, ...]
    views: tuple[Relation, ...]
    types: tuple[Relation, ...]

    @property
    def public_functions(self) -> list[Function]:
        return [f for f in self.functions if f.public]


ROLES_SQL = r"""
SELECT r.rolname FROM pg_catalog.pg_roles AS r
WHERE r.rolname LIKE 'jobq\_%' AND (
      EXISTS (SELECT FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
              WHERE p.pronamespace = 'jobq'::regnamespace AND a.grantee = r.oid)
   OR EXISTS (SELECT FROM pg_catalog.pg_class AS c, pg_catalog.aclexplode(c.relacl) AS a
              WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = 'v' AND a.grantee = r.oid))
ORDER BY 1
"""
FUNCTIONS_SQL = """
SELECT p.oid::int8, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid),
       pg_catalog.pg_get_function_arguments(p.oid), pg_catalog.pg_get_function_result(p.oid),
       coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), ''), p.prosrc, p.prosecdef,
       coalesce(p.proconfig, '{}'),
       ARRAY(SELECT r FROM unnest(%(roles)s::text[]) AS r
             WHERE pg_catalog.has_function_privilege(r, p.oid, 'EXECUTE') ORDER BY r)
FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace = 'jobq'::regnamespace
ORDER BY p.proname, p.oid  -- overloads in the order the install script creates them
"""
RELATIONS_SQL = """
SELECT c.oid::int8, c.relname,
       coalesce(pg_catalog.obj_description(coalesce(t.oid, c.oid),
                                           CASE c.relkind WHEN 'c' THEN 'pg_type' ELSE 'pg_class' END), ''),
       ARRAY(SELECT r FROM unnest(%(roles)s::text[]) AS r
             WHERE c.relkind = 'v' AND pg_catalog.has_table_privilege(r, c.oid, 'SELECT') ORDER BY r)
FROM pg_catalog.pg_class AS c
LEFT JOIN pg_catalog.pg_type AS t ON t.typrelid = c.oid AND c.relkind = 'c'
WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = %(kind)s
ORDER BY c.relname
"""
COLUMNS_SQL = """
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
       coalesce(pg_catalog.col_description(a.attrelid, a.attnum), '')
FROM pg_catalog.pg_attribute AS a
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def read_catalog(conn: psycopg.Connection[tuple[object, ...]]) -> Catalog:
    """Everything the reference says, read from a database where jobq is installed."""
    version = conn.execute("SELECT jobq.version()").fetchone()
    roles = tuple(str(r[0]) for r in conn.execute(ROLES_SQL).fetchall())
    functions = tuple(
        Function(oid=int(str(r[0])), name=str(r[1]), identity=str(r[2]), arguments=str(r[3]),
                 result=str(r[4]), comment=str(r[5]).strip(), source=str(r[6]), definer=bool(r[7]),
                 settings=tuple(str(s) for s in _list(r[8])), callers=tuple(str(s) for s in _list(r[9])))
        for r in conn.execute(FUNCTIONS_SQL, {"roles": list(roles)}).fetchall())

    def relations(kind: str) -> tuple[Relation, ...]:
        rows = conn.execute(RELATIONS_SQL, {"roles": list(roles), "kind": kind}).fetchall()
        return tuple(
            Relation(name=str(r[1]), comment=str(r[2]).strip(), readers=tuple(str(s) for s in _list(r[3])),
                     columns=tuple(Column(str(c[0]), str(c[1]), str(c[2]).strip())
                                   for c in conn.execute(COLUMNS_SQL, (r[0],)).fetchall()))
            for r in rows)

    return Catalog(version=str(version[0]) if version else "", roles=roles, functions=functions,
                   views=relations("v"), types=relations("c"))


def _list(value: object) -> list[object]:
    assert isinstance(value, list), value
    return value


def direct_codes(function: Function) -> set[str]:
    return {a or b for a, b in RAISES.findall(function.body.text)}


def raised_codes(catalog: Catalog) -> dict[int, frozenset[str]]:
    """Every function's JQ codes: its own and, transitively, those of the jobq functions it calls."""
    by_name: dict[str, list[int]] = {}
    for f in catalog.functions:
        by_name.setdefault(f.name, []).append(f.oid)
    calls = {f.oid: {oid for name in CALL.findall(f.body.code) for oid in by_name.get(name, [])}
             for f in catalog.functions}
    codes = {f.oid: set(direct_codes(f)) for f in catalog.functions}
    changed = True
    while changed:
        changed = False
        for oid, callees in calls.items():
            before = len(codes[oid])
            for callee in callees:
                codes[oid] |= codes[callee]
            changed |= len(codes[oid]) != before
    return {oid: frozenset(c) for oid, c in codes.items()}
