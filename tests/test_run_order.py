"""The order a parallel run starts its tests in (tests/conftest.py's
LONG_FIRST): every entry still names a test, and the hook puts them first,
in the list's order, leaving the others as collected."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace

from tests.conftest import LONG_FIRST, ROOT, long_first_rank, pytest_collection_modifyitems


def defined_tests(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_long_first_entry_names_a_test_file_function_and_parameter() -> None:
    assert len(set(LONG_FIRST)) == len(LONG_FIRST), "an entry is listed twice"
    for prefix in LONG_FIRST:
        path, _, rest = prefix.partition("::")
        assert (ROOT / path).is_file(), f"{prefix}: no file {path}"
        if not rest:
            continue
        found = re.fullmatch(r"(\w+)(?:\[(.+)\])?", rest)
        assert found, f"{prefix}: not a test name"
        assert found.group(1) in defined_tests(path), f"{prefix}: {path} has no {found.group(1)}"
        if found.group(2) is not None and found.group(2).startswith("docs/"):
            assert (ROOT / found.group(2)).is_file(), f"{prefix}: no {found.group(2)}"


@dataclass
class Item:
    nodeid: str


OUTSIDE_XDIST = SimpleNamespace(option=SimpleNamespace())  # a config without xdist's loadgroup


def test_an_xdist_group_runs_on_one_process() -> None:
    """Under --dist loadgroup the tests of one xdist_group run on one xdist
    process, so that a module-scoped fixture is built once (pytest 9.2 with
    pytest-xdist 3.8 split them: the conftest hook names the group)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v",
         "-m", "not alone", "tests/test_bench.py", "-k",
         "bad_list or full_run or repeated or add_arguments or in_transaction_mode"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", done.stdout, re.MULTILINE)
    assert len(ran) == 5, done.stdout
    assert all(nodeid.endswith("@bench") for _, nodeid in ran), ran
    assert len({worker for worker, _ in ran}) == 1, f"the group was split: {ran}"


def test_the_long_tests_come_first_in_order_and_the_rest_as_collected() -> None:
    first, second = LONG_FIRST[0], LONG_FIRST[1]
    items = [Item("tests/test_a.py::test_one"), Item(second),
             Item("tests/test_b.py::test_two"), Item(first), Item("tests/test_a.py::test_three")]
    pytest_collection_modifyitems(OUTSIDE_XDIST, items)  # type: ignore[arg-type]  # only nodeid is read
    assert [item.nodeid for item in items] == [
        first, second, "tests/test_a.py::test_one", "tests/test_b.py::test_two",
        "tests/test_a.py::test_three"]
    assert long_first_rank("tests/test_a.py::test_one") == len(LONG_FIRST)
    assert long_first_rank(LONG_FIRST[2] + ("x" if LONG_FIRST[2].endswith("::") else "")) == 2
