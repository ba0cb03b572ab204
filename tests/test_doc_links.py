"""The README and the guides point at things that exist (no database needed).

- every relative link of README.md and docs/*.md names a file or folder of
  the repository, and a ``#anchor`` names a heading of the Markdown file it
  points into;
- every test that docs/guarantees.md names as its proof exists: a
  ``tests/test_x.py::test_name`` is a test function of that file, and a
  ``pgtap/x.sql`` is a pgTAP file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GUARANTEES = ROOT / "docs" / "guarantees.md"

FENCED = re.compile(r"^[ \t]*(`{3,}).*?^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
PYTEST_REF = re.compile(r"\b(tests/[\w/]+\.py)::(\w+)")
PGTAP_REF = re.compile(r"\b(pgtap/[\w/]+\.sql)\b")


def prose(path: Path) -> str:
    """The Markdown of a document without its code: fenced blocks and inline code spans."""
    return INLINE_CODE.sub("", FENCED.sub("", path.read_text()))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[`*_]", "", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file: its headings (GitHub numbers repeats) and <a id> tags."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCED.sub("", path.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
        found.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no heading #{anchor} in {linked.relative_to(ROOT)})")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    broken = broken_links(path)
    assert not broken, f"{path.relative_to(ROOT)}: {broken}"


def test_the_checker_sees_links_and_headings() -> None:
    """The checker itself: it finds the README's links into docs/, and knows a heading's anchor."""
    readme_links = LINK.findall(prose(ROOT / "README.md"))
    assert any(t.startswith("docs/") for t in readme_links), readme_links
    assert slug("Wake-up by NOTIFY, with polling as the safety net") == \
        "wake-up-by-notify-with-polling-as-the-safety-net"
    assert slug("`jobq.claim(queue, n)`: lease jobs") == "jobqclaimqueue-n-lease-jobs"
    assert "promised" in anchors(GUARANTEES) and "not-promised" in anchors(GUARANTEES)


def defined_tests(path: Path) -> set[str]:
    """The names of the test functions (sync and async, top level or in classes) of a test file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def test_every_test_the_guarantees_name_exists() -> None:
    text = GUARANTEES.read_text()
    pytest_refs = sorted(set(PYTEST_REF.findall(text)))
    pgtap_refs = sorted(set(PGTAP_REF.findall(text)))
    assert len(pytest_refs) >= 40 and len(pgtap_refs) >= 15, "the guarantees lost their proofs"
    missing = []
    for file, name in pytest_refs:
        path = ROOT / file
        if not path.is_file():
            missing.append(f"{file} (no such file)")
        elif name not in defined_tests(path):
            missing.append(f"{file}::{name}")
    missing += [f"{file} (no such file)" for file in pgtap_refs if not (ROOT / file).is_file()]
    assert not missing, f"docs/guarantees.md names tests that do not exist: {missing}"


def test_every_guarantee_names_a_test() -> None:
    """Each promise (a ### section under "Promised") cites at least one test."""
    promised = GUARANTEES.read_text().split("## Promised", 1)[1].split("## Not promised", 1)[0]
    sections = re.split(r"^### ", promised, flags=re.MULTILINE)[1:]
    assert len(sections) >= 14, f"only {len(sections)} guarantees"
    unproven = [s.splitlines()[0] for s in sections if not (PYTEST_REF.search(s) or PGTAP_REF.search(s))]
    assert not unproven, f"guarantees without a test: {unproven}"
