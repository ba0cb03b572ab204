"""Write the client calls of pyqueue.client and pyqueue._aioclient from their statement builders.

    python3 -m tools.client_calls [--check]     (from the repository root; ``make client``)

Each client call is written once, as a statement builder in
``pyqueue/_statements.py`` (or ``_workflow_statements.py``,
``_grant_statements.py``): its name, arguments, checks, SQL, result and
docstring. This tool writes, for every public builder that returns a
``Statement[...]`` (but those in ``HAND_WRITTEN``), a plain function into
each client module, between the markers ``BEGIN`` and ``END``: the same
name, ``conn`` first and then the builder's parameters, the builder's
docstring, and one line that sends the builder's statement::

    def retry(conn: Connection, job_id: int) -> bool:
        \"\"\"Run a dead, cancelled or waiting job again now; ...\"\"\"
        return run(conn, s.retry(job_id))

``pyqueue._aioclient`` gets the same with ``async def``, ``AsyncConnection``
and ``await arun``. A builder whose statement claims jobs (``Claimed``)
returns them as jobs bound to ``conn`` (``_jobs``, hand-written in each
module). The rest of the two modules (imports, ``__all__``, the hand-written
calls) is theirs. Only the source text is read (``ast``): nothing is imported.

With ``--check`` it writes nothing and exits 1 when a module is stale;
``tests/test_layout.py`` runs the same comparison.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The statement builder modules, each with the name the client modules import it as.
BUILDERS = {"pyqueue/_statements.py": "s", "pyqueue/_workflow_statements.py": "w",
            "pyqueue/_grant_statements.py": "g"}
# Builders that are not sent as they are: why, and where their call is.
HAND_WRITTEN = {
    "complete_many": "marks the jobs acknowledged; written in each client module",
    "take": "a context manager around a transaction; written in each client module",
    "watch": "the first step of pyqueue.wait (pyqueue.waiting)",
}
BEGIN = "# --- BEGIN calls written by tools/client_calls.py from their statement builders: do not edit ---\n"
END = "# --- END calls written by tools/client_calls.py ---\n"
LINE_LENGTH = 110  # ruff's


@dataclass(frozen=True)
class Flavour:
    """How one client module sends a statement."""

    path: str
    define: str  # "def" or "async def"
    connection: str
    send: str  # the call that sends a Statement
    jobs: str  # what a claim returns


SYNC = Flavour("pyqueue/client.py", "def", "Connection", "run", "list[Job]")
ASYNC = Flavour("pyqueue/_aioclient.py", "async def", "AsyncConnection", "await arun", "list[AsyncJob]")


@dataclass(frozen=True)
class Builder:
    """A statement builder as its source says it: the text of its parameters,
    the arguments that pass them on, its statement's result type, its docstring."""

    module: str  # the name the client modules import its module as
    name: str
    parameters: list[str]
    arguments: list[str]
    result: str
    docstring: str


def builders(root: Path = ROOT) -> list[Builder]:
    """The builders the client modules send, in source order, module by module."""
    found = []
    for path, alias in BUILDERS.items():
        source = (root / path).read_text()
        for node in ast.parse(source).body:
            if (isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
                    and node.name not in HAND_WRITTEN and isinstance(node.returns, ast.Subscript)
                    and ast.unparse(node.returns.value) == "Statement"):
                found.append(read_builder(source, alias, node))
    return found


def read_builder(source: str, alias: str, node: ast.FunctionDef) -> Builder:
    def text(part: ast.AST) -> str:
        segment = ast.get_source_segment(source, part)
        assert segment is not None, f"{node.name}: no source for {ast.unparse(part)}"
        return segment

    def parameter(arg: ast.arg, default: ast.expr | None, prefix: str = "") -> str:
        annotation = f": {text(arg.annotation)}" if arg.annotation else ""
        return f"{prefix}{arg.arg}{annotation}" + (f" = {text(default)}" if default else "")

    spec = node.args
    assert not spec.posonlyargs and spec.vararg is None, f"{node.name}: only plain and keyword parameters"
    defaults: list[ast.expr | None] = [None] * (len(spec.args) - len(spec.defaults))
    defaults += spec.defaults
    parameters = [parameter(arg, default) for arg, default in zip(spec.args, defaults, strict=True)]
    arguments = [arg.arg for arg in spec.args]
    if spec.kwonlyargs:
        parameters.append("*")
        parameters += [parameter(arg, default) for arg, default in zip(spec.kwonlyargs, spec.kw_defaults,
                                                                       strict=True)]
        arguments += [f"{arg.arg}={arg.arg}" for arg in spec.kwonlyargs]
    if spec.kwarg is not None:
        parameters.append(parameter(spec.kwarg, None, "**"))
        arguments.append(f"**{spec.kwarg.arg}")
    docstring = node.body[0]
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant), \
        f"{node.name} has no docstring: it is the client call's"
    assert isinstance(node.returns, ast.Subscript)
    return Builder(alias, node.name, parameters, arguments, text(node.returns.slice), text(docstring))


def wrapped(head: str, items: list[str], tail: str, indent: str) -> list[str]:
    """``head`` + the comma-separated ``items`` + ``tail`` on one line, or, when
    that is too long, the items packed on the following lines."""
    line = head + ", ".join(items) + tail
    if len(line) <= LINE_LENGTH:
        return [line]
    lines, current = [head], indent
    for item in items:
        if current.strip() and len(current) + len(item) + 1 > LINE_LENGTH:
            lines.append(current.rstrip())
            current = indent
        current += item + ", "
    lines.append(current.removesuffix(", ") + tail)
    return lines


def call(builder: Builder, flavour: Flavour) -> str:
    """The client function of ``flavour`` that sends ``builder``'s statement."""
    claims = builder.result == "Claimed"
    returns = flavour.jobs if claims else builder.result
    parameters = [f"conn: {flavour.connection}", *builder.parameters]
    head = f"{flavour.define} {builder.name}("
    one_line = f"{head}{', '.join(parameters)}) -> {returns}:"
    lines = ([one_line] if len(one_line) <= LINE_LENGTH
             else [head, *(f"    {parameter}," for parameter in parameters), f") -> {returns}:"])
    lines.append(f"    {builder.docstring}")
    send = f"{flavour.send}(conn, {builder.module}.{builder.name}("
    if claims:
        send = ("await " if flavour.define.startswith("async") else "") + f"_jobs(conn, {send}"
    closing = ")))" if claims else "))"
    lines += wrapped(f"    return {send}", builder.arguments, closing, "        ")
    return "\n".join(lines) + "\n"


def written(flavour: Flavour, root: Path = ROOT) -> str:
    """The text ``flavour``'s module should have: its own, with the calls
    between the markers written anew."""
    current = (root / flavour.path).read_text()
    before, begin, rest = current.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{flavour.path}: the markers {BEGIN.strip()!r} and {END.strip()!r} are missing")
    calls = "\n\n".join(call(builder, flavour) for builder in builders(root))
    return f"{before}{BEGIN}\n\n{calls}\n\n{END}{after}"


def stale(root: Path = ROOT) -> list[str]:
    """The client modules whose written calls differ from their builders'."""
    return [flavour.path for flavour in (SYNC, ASYNC)
            if written(flavour, root) != (root / flavour.path).read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a module is stale")
    args = parser.parse_args(argv)
    if args.check:
        if found := stale():
            print(f"stale: {', '.join(found)} (run make client)", file=sys.stderr)
            return 1
        return 0
    for flavour in (SYNC, ASYNC):
        text = written(flavour)
        if text != (ROOT / flavour.path).read_text():
            (ROOT / flavour.path).write_text(text)
            print(f"wrote {flavour.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
