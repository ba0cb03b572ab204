"""The distribution is named ``jobq`` and every install line says so (issue 29, items 1 and 3).

On the package index, ``pyqueue`` is an unrelated project: a reader who ran
``pip install 'pyqueue[dashboard]'`` got someone else's code. The import
package and the command stay ``pyqueue``; the distribution, its extras and
every install line in the docs, help texts and error hints name ``jobq`` (or
the checkout, ``./``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `pip install pyqueue`, `pip install 'pyqueue[dashboard]'`, "pyqueue[metrics]" in a hint...
OLD_SPELLING = re.compile(r"pip install\s+['\"]?pyqueue\b|['\"]pyqueue\["
                          r"|\bpyqueue\[(dashboard|metrics|bench|dev|binary)\]")


def scanned_files() -> list[Path]:
    return sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.md"),
                   *(ROOT / "pyqueue").rglob("*.py"), *(ROOT / "pyqueue").rglob("*.html")])


def test_the_wheel_is_named_jobq_and_carries_pyqueue(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=120)
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.startswith("jobq-")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        entry_points = archive.read(metadata_name.replace("METADATA", "entry_points.txt")).decode()
    assert metadata["Name"] == "jobq"
    assert {"dashboard", "metrics"} <= set(metadata.get_all("Provides-Extra") or [])
    assert "pyqueue/__init__.py" in names and "pyqueue/sql/jobq.control" in names
    assert "pyqueue = pyqueue.cli:main" in entry_points


def test_no_install_line_names_the_other_project() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in scanned_files()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if OLD_SPELLING.search(line)]
    assert found == []


def test_help_texts_name_the_jobq_extras() -> None:
    # `pyqueue --help` lists `dashboard` with its extra; `worker --help` explains --metrics-port.
    wanted: list[tuple[list[str], str]] = [([], "pip install 'jobq[dashboard]'"),
                                           (["worker"], "pip install 'jobq[metrics]'")]
    for command, extra in wanted:
        done = subprocess.run([sys.executable, "-m", "pyqueue", *command, "--help"],
                              capture_output=True, text=True, timeout=60, check=True)
        assert extra in " ".join(done.stdout.replace("-\n", "-").split()), command


def test_python_install_lines_show_the_virtualenv() -> None:
    # Debian 12 refuses `pip install ./` into the system Python (externally-managed-environment).
    for doc in ("README.md", "docs/python.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        venv = text.find("python3 -m venv")
        assert venv != -1, doc
        assert venv < text.find("\npip install ./"), doc
