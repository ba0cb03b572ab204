"""Docs never name a stale install script (issue 29, item 2).

A reader who copies ``sql/jobq--X.sql`` from a doc installs X. So wherever
the docs, examples or pyqueue's help and docstrings name a full install
script ``jobq--X.Y.Z.sql``, X.Y.Z must be ``default_version`` of
sql/jobq.control. Upgrade steps (``jobq--A--B.sql``) are not install
scripts and are not checked.

Excluded on purpose, because they name old versions as history, not as
something to run: CHANGELOG.md (not scanned), docs/performance.md (the
history of measurements against frozen releases), pyqueue/bench/ (benchmarks
that load a frozen old release to compare with), and sql/src/README.md (not
scanned: its "making a version" section is for maintainers).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import default_version

ROOT = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = re.compile(r"jobq--(\d+\.\d+\.\d+)\.sql")
EXCLUDED = {
    Path("docs/performance.md"),  # history of benchmark runs against frozen releases
}
EXCLUDED_DIRS = (Path("pyqueue/bench"),)  # benchmarks load frozen old releases on purpose


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.md"),
             *(ROOT / "pyqueue").rglob("*.py"), *(ROOT / "pyqueue").rglob("*.html")]
    chosen = []
    for path in files:
        rel = path.relative_to(ROOT)
        if rel in EXCLUDED or any(rel.is_relative_to(d) for d in EXCLUDED_DIRS):
            continue
        chosen.append(path)
    return sorted(chosen)


def stale_mentions() -> list[str]:
    current = default_version()
    found = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in INSTALL_SCRIPT.finditer(line):
                if match.group(1) != current:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)} (current {current})")
    return found


def test_scan_covers_the_docs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    assert {"README.md", "docs/tutorial.md", "docs/operations.md", "pyqueue/cli/__init__.py"} <= names


def test_docs_name_only_the_current_install_script() -> None:
    assert stale_mentions() == []
