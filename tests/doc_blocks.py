"""The fenced code blocks of README.md and docs/*.md, and how tests/test_docs.py
runs them.

A block's language says how it runs:

- ``sql`` / ``psql``: pasted into one ``psql`` session per document, in order
  (``\\gset`` variables carry from block to block), with ON_ERROR_STOP;
- ``python``: a fresh interpreter, with ``DATABASE_URL`` set;
- ``sh`` / ``bash``: ``bash -euo pipefail`` from the repository root, with
  ``DATABASE_URL`` set, the libpq variables ``PGHOST``, ``PGPORT`` and
  ``PGUSER`` pointing at the test server (so ``createdb app`` works), and
  the virtualenv's ``bin`` first on ``PATH``;
- ``text``: output, diagrams and layouts, never run.

An HTML comment on the line before the opening fence changes that:

- ``<!-- not-run: REASON -->``: the block is not run (a test counts these and
  wants a reason on each);
- ``<!-- until-stopped: QUEUE ... -->``: the block runs until someone stops
  it (a worker of those queues); the test stops it with SIGTERM (a shell
  block with SIGINT to its process group, as Ctrl-C would) once the
  queues have no ready or running job left, and wants exit status 0, at
  least one job of them completed, and no failed attempt;
- ``<!-- on-standby: REASON -->``: the block needs a streaming standby, so
  tests/test_docs.py leaves it to tests/test_failover.py, which runs it
  (a shell block) against a real one, ``$REPLICA`` its host.
- ``<!-- bench-run: REASON -->``: docs/performance.md's smallest benchmark
  run (a shell block), which tests/test_bench.py runs as written, once, and
  checks what it wrote; tests/test_docs.py leaves it to that test (two runs
  of the same benchmark would double a long test for nothing).

A document's own database: README.md starts from an empty database (its tour
installs jobq); every docs/*.md starts from one with jobq installed by
``CREATE EXTENSION jobq``, and with pg_cron installed first when the document
carries ``<!-- docs-database: pg_cron -->``.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from pyqueue.localserver import find_bindir

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = {"sql": "sql", "psql": "sql", "python": "python", "sh": "sh", "bash": "sh", "text": "text"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not-run|until-stopped|on-standby|bench-run)\b(?P<rest>.*?)-->\s*$")
CRON_MARKER = "<!-- docs-database: pg_cron -->"
OTHERS_RUN_IT = {"not-run", "on-standby", "bench-run"}  # markers of blocks tests/test_docs.py does not run


@dataclass(frozen=True)
class Block:
    """One fenced code block of a document."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str  # as written after the fence ("" when none)
    text: str
    marker: str | None = None  # "not-run" | "until-stopped" | "on-standby" | "bench-run" | None
    reason: str = ""  # the not-run reason, or the until-stopped queues

    @property
    def kind(self) -> str | None:
        """How the block runs: "sql", "python", "sh", "text", or None for an unknown language."""
        return LANGUAGES.get(self.language)

    @property
    def queues(self) -> list[str]:
        """The queues an until-stopped block works."""
        return self.reason.split() if self.marker == "until-stopped" else []

    @property
    def runs(self) -> bool:
        return self.kind in {"sql", "python", "sh"} and self.marker not in OTHERS_RUN_IT

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    """README.md and every docs/*.md, README first."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse_marker(line: str) -> tuple[str, str] | None:
    found = MARKER.match(line)
    if not found:
        return None
    reason = found.group("rest").strip()
    if reason.startswith(":"):
        reason = reason[1:].strip()
    return found.group("kind"), reason


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        language = opening.group("info").strip().split(" ")[0] if opening.group("info").strip() else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            text = lines[j]
            body.append(text[len(indent):] if text.startswith(indent) else text.lstrip())
            j += 1
        if j == len(lines):
            raise ValueError(f"{path.name}:{i + 1}: a code block is never closed")
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = parse_marker(previous)
        found.append(Block(path=path, line=i + 1, language=language, text="\n".join(body) + "\n",
                           marker=marker[0] if marker else None, reason=marker[1] if marker else ""))
        i = j + 1
    return found


def stray_markers(path: Path) -> list[int]:
    """Lines with a run marker that is not right before a code block."""
    lines = path.read_text().splitlines()
    stray = []
    for i, line in enumerate(lines):
        if parse_marker(line) is None:
            continue
        following = next((lines[k] for k in range(i + 1, len(lines)) if lines[k].strip()), "")
        if not FENCE.match(following):
            stray.append(i + 1)
    return stray


def wants_pg_cron(path: Path) -> bool:
    return CRON_MARKER in path.read_text()


def block_env(url: str) -> dict[str, str]:
    """The environment a python or sh block runs in: DATABASE_URL, libpq's variables, the venv first."""
    venv_bin = str(Path(sys.executable).parent)
    server = conninfo_to_dict(url)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PG")},
        "DATABASE_URL": url,
        "PGHOST": str(server["host"]),
        "PGPORT": str(server["port"]),
        "PGUSER": str(server["user"]),
        "PATH": f"{venv_bin}:{find_bindir()}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PAGER": "cat",
    }
