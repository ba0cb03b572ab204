"""The SQL sources in sql/src/ and the scripts assembled from them (issue 13).

The committed install script of the default version and its upgrade script
are exactly what ``tools/sql_assemble.py`` makes of the sources (else: run
make sql); the released scripts match sql/released.sha256 byte for byte;
every function is defined once, with a purpose comment and a COMMENT ON
FUNCTION; and the tool refuses bad input with a message that says where.
No database: these checks read files and run the tool on copies of sql/.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SQL_DIR, default_version

TOOL = ROOT / "tools" / "sql_assemble.py"
SRC_DIR = SQL_DIR / "src"
RELEASED = SQL_DIR / "released.sha256"
INSTALL = re.compile(r"^jobq--(\d+\.\d+\.\d+)\.sql$")
STEP = re.compile(r"^jobq--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$")
CREATE_FUNCTION = re.compile(r"^CREATE FUNCTION (jobq\.\w+)\(", re.MULTILINE)
COMMENT_FUNCTION = re.compile(r"^COMMENT ON FUNCTION (jobq\.\w+\([^)]*\))", re.MULTILINE)


def run_tool(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "--root", str(root), *args], capture_output=True, text=True, check=False
    )


def current_scripts(version: str) -> list[str]:
    """The committed scripts of the default version: its install script and the steps to it."""
    names = [f"jobq--{version}.sql"]
    names += sorted(
        p.name for p in SQL_DIR.glob("jobq--*.sql") if (m := STEP.match(p.name)) and m[2] == version
    )
    return names


def released() -> dict[str, str]:
    listed: dict[str, str] = {}
    for line in RELEASED.read_text(encoding="utf-8").splitlines():
        digest, name = line.split("  ")
        listed[name] = digest
    return listed


def signature(text: str) -> str:
    return re.sub(r"\s*([(),])\s*", r"\1", " ".join(text.split()))


def source_functions() -> list[tuple[str, str, str]]:
    """(file, COMMENT signature, definition text) of every CREATE FUNCTION in the sources."""
    found: list[tuple[str, str, str]] = []
    for path in sorted(SRC_DIR.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        starts = [m.start() for m in CREATE_FUNCTION.finditer(text)]
        ends = [*starts[1:], len(text)] if starts else []
        for start, end in zip(starts, ends, strict=True):
            chunk = text[start:end]
            comment = COMMENT_FUNCTION.search(chunk)
            name = CREATE_FUNCTION.match(chunk)
            assert name is not None
            assert comment is not None and comment[1].startswith(f"{name[1]}("), (
                f"{path.name}: {name[1]} has no COMMENT ON FUNCTION before the next definition"
            )
            found.append((path.name, signature(comment[1]), chunk))
    return found


def current_template() -> Path:
    """The upgrade template to the default version (the only one in sql/src/upgrades)."""
    templates = sorted((SRC_DIR / "upgrades").glob("*.sql"))
    assert [p.name for p in templates] == [f"{templates[0].name.split('--')[0]}--{default_version()}.sql"], (
        f"sql/src/upgrades holds exactly one template, to {default_version()}: {[p.name for p in templates]}"
    )
    return templates[0]


def next_minor(version: str) -> str:
    major, minor, _ = version.split(".")
    return f"{major}.{int(minor) + 1}.0"


@pytest.fixture
def sql_copy(tmp_path: Path) -> Path:
    """A checkout root holding a copy of the real sql/ (sources, templates, scripts)."""
    shutil.copytree(SQL_DIR, tmp_path / "sql")
    return tmp_path


# --- (a) the committed scripts are what the sources assemble ----------------


def test_assembling_the_sources_gives_the_committed_scripts(tmp_path: Path) -> None:
    version = default_version()
    result = run_tool("build", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    expected = current_scripts(version)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)
    assert len(expected) >= 2, "the default version has an install script and an upgrade step"
    for name in expected:
        assembled = (tmp_path / name).read_bytes()
        assert assembled == (SQL_DIR / name).read_bytes(), f"sql/{name} is stale: run make sql"


def test_the_tool_finds_the_checkout_up_to_date(tmp_path: Path) -> None:
    result = run_tool("check")
    assert result.returncode == 0, f"{result.stderr}\nrun make sql"
    assert run_tool("build", "--out", str(tmp_path)).stdout.count(": written") == len(
        current_scripts(default_version())
    )
    again = run_tool("build", "--out", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count(": up to date") == len(current_scripts(default_version()))
    assert "written" not in again.stdout


# --- (b) released scripts are frozen ------------------------------------------


def test_released_scripts_match_their_recorded_sha256() -> None:
    listed = released()
    for name, digest in listed.items():
        assert hashlib.sha256((SQL_DIR / name).read_bytes()).hexdigest() == digest, (
            f"sql/{name} is released and changed: released scripts are frozen (make a new version instead)"
        )
    assert {"jobq--0.1.0.sql", "jobq--0.4.0.sql", "jobq--0.3.0--0.4.0.sql"} <= set(listed)


def test_every_script_of_an_earlier_version_is_released() -> None:
    current = set(current_scripts(default_version()))
    scripts = {p.name for p in SQL_DIR.glob("jobq--*.sql")}
    assert scripts - current <= set(released()), "freeze them: python3 tools/sql_assemble.py freeze"
    assert set(released()) <= scripts


# --- (c) every function: defined once, commented, findable -------------------


def test_every_function_is_defined_once_with_a_comment_and_a_purpose_line() -> None:
    functions = source_functions()
    keys = [key for _, key, _ in functions]
    assert len(keys) == len(set(keys)), f"defined twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    for file, key, chunk in functions:
        lines = chunk.split("\n")
        body = next(i for i, line in enumerate(lines) if re.match(r"^AS \$\w*\$$", line))
        if any(line.startswith("LANGUAGE plpgsql") for line in lines[:body]):
            body = next(i for i in range(body, len(lines)) if lines[i].strip() == "BEGIN")
        opening = next(line.strip() for line in lines[body + 1 :] if line.strip())
        assert opening.startswith("-- "), f"{file}: {key} does not open its body with a purpose comment"
    installed = (SQL_DIR / f"jobq--{default_version()}.sql").read_text(encoding="utf-8")
    assert {signature(s) for s in COMMENT_FUNCTION.findall(installed)} == set(keys)
    assert len(CREATE_FUNCTION.findall(installed)) == len(keys)


def test_a_reader_finds_claim_in_claim_sql() -> None:
    files = {key: file for file, key, _ in source_functions()}
    assert files["jobq.claim(text,bigint,text,interval)"] == "claim.sql"
    assert (
        files["jobq.enqueue(text,jsonb,timestamptz,integer,integer,text,text,interval,interval,"
              "bigint[],text,jsonb,text,text)"]
        == "enqueue.sql"
    )
    assert files["jobq.complete(bigint,uuid,jsonb)"] == "complete_fail.sql"
    result = run_tool("where", "claim")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        line for line in result.stdout.splitlines() if line.startswith("sql/src/claim.sql:")
    ]
    assert len(result.stdout.splitlines()) == 2  # the text and the text[] overloads


def test_every_source_file_is_in_the_manifest_in_install_order() -> None:
    manifest = [
        line
        for line in (SRC_DIR / "manifest").read_text(encoding="utf-8").splitlines()
        if line and line[0] != "#"
    ]
    assert sorted(manifest) == sorted(p.name for p in SRC_DIR.glob("*.sql"))
    joined = "\n".join((SRC_DIR / name).read_text(encoding="utf-8") for name in manifest)
    installed = (SQL_DIR / f"jobq--{default_version()}.sql").read_text(encoding="utf-8")
    assert joined.replace("@VERSION@", default_version()) == installed


# --- (d) bad input is refused, clearly, and nothing is written -----------------


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def assert_refused(root: Path, *messages: str) -> None:
    before = {p.name: p.read_bytes() for p in (root / "sql").glob("jobq--*.sql")}
    result = run_tool("build", root=root)
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith("sql_assemble: ")
    for message in messages:
        assert message in result.stderr
    assert {p.name: p.read_bytes() for p in (root / "sql").glob("jobq--*.sql")} == before


def test_an_unknown_function_in_a_directive_is_refused(sql_copy: Path) -> None:
    template = sql_copy / "sql/src/upgrades" / current_template().name
    # every template replaces jobq.version(), the one function each version changes
    changed = "-- @replace-function jobq.version(integer)"
    edit(template, "-- @replace-function jobq.version()", changed)
    line = template.read_text(encoding="utf-8").split("\n").index(changed) + 1
    assert_refused(
        sql_copy,
        f"{template.name}:{line}: unknown function jobq.version(integer)",
        "the sources define jobq.version()",
    )


def test_a_misspelled_directive_is_refused(sql_copy: Path) -> None:
    template = sql_copy / "sql/src/upgrades" / current_template().name
    edit(template, "-- @replace-function jobq.version()", "-- @replace_function jobq.version()")
    assert_refused(sql_copy, "unknown directive '-- @replace_function jobq.version()'")


def test_a_function_defined_twice_is_refused(sql_copy: Path) -> None:
    claim = sql_copy / "sql/src/claim.sql"
    text = claim.read_text(encoding="utf-8")
    start = text.index("CREATE FUNCTION jobq.claim(")
    end = text.index("\n\n", text.index("COMMENT ON FUNCTION jobq.claim(text, bigint"))
    reap = sql_copy / "sql/src/reap.sql"
    reap.write_text(reap.read_text(encoding="utf-8") + "\n" + text[start:end] + "\n", encoding="utf-8")
    assert_refused(
        sql_copy,
        "sql/src/reap.sql:",
        "jobq.claim(text,bigint,text,interval) is defined twice",
        "first at sql/src/claim.sql:",
    )


def test_a_function_without_its_comment_is_refused(sql_copy: Path) -> None:
    edit(sql_copy / "sql/src/reap.sql", "COMMENT ON FUNCTION jobq.reap(integer) IS", "SELECT 1 /*")
    assert_refused(sql_copy, "sql/src/reap.sql:", "must be followed by its COMMENT ON FUNCTION jobq.reap")


def test_changing_a_released_version_is_refused(sql_copy: Path) -> None:
    version = default_version()
    # The default version released (as it is once frozen; frozen here in the copy when not yet).
    assert run_tool("freeze", root=sql_copy).returncode == 0
    edit(sql_copy / "sql/src/claim.sql", "-- Lease up to n ready jobs", "-- Lease at most n ready jobs")
    template = sql_copy / "sql/src/upgrades" / current_template().name
    directive = "-- @replace-function jobq.claim(text, bigint, text, interval)\n"
    if "jobq.claim(text, bigint, text, interval)" not in template.read_text(encoding="utf-8"):
        # the step brings the change in: only the release refuses it
        with template.open("a", encoding="utf-8") as out:
            out.write(directive)
    assert_refused(
        sql_copy, f"sql/jobq--{version}.sql is released", "set default_version in sql/jobq.control"
    )
    checked = run_tool("check", root=sql_copy)
    assert checked.returncode == 1
    assert f"jobq--{version}.sql is stale" in checked.stderr and "run make sql" in checked.stderr


def test_a_changed_released_script_fails_the_check(sql_copy: Path) -> None:
    with (sql_copy / "sql/jobq--0.2.0.sql").open("a", encoding="utf-8") as script:
        script.write("-- one more line\n")
    checked = run_tool("check", root=sql_copy)
    assert checked.returncode == 1
    assert "jobq--0.2.0.sql is released (listed in sql/released.sha256) and has changed" in checked.stderr


def test_a_template_that_leaves_out_a_changed_function_is_refused(sql_copy: Path) -> None:
    template = sql_copy / "sql/src/upgrades" / current_template().name
    edit(template, "-- @replace-function jobq.version()\n", "")
    assert_refused(sql_copy, "new or changed since the release it upgrades but not in it: "
                             "jobq.version()")


# --- the next version: how the one after the default version is made ----------


def test_the_next_version_is_assembled_frozen_and_then_refused(sql_copy: Path) -> None:
    sql = sql_copy / "sql"
    version = default_version()
    after = next_minor(version)
    assert run_tool("freeze", root=sql_copy).returncode == 0, "the default version released (in the copy)"
    edit(sql / "jobq.control", f"default_version = '{version}'", f"default_version = '{after}'")
    old_template = sql / "src/upgrades" / current_template().name
    assert_refused(
        sql_copy,
        f"{old_template.name}: upgrades to {version}, but the sources hold {after}",
        "delete this template",
    )
    old_template.unlink()
    assert_refused(sql_copy, f"no upgrade template to {after}", f"add {version}--{after}.sql")
    edit(sql / "src/claim.sql", "-- Lease up to n ready jobs", "-- Lease at most n ready jobs")
    template = sql / f"src/upgrades/{version}--{after}.sql"
    template.write_text(
        f"-- jobq {version} → {after}\n-- @replace-function jobq.version()\n", encoding="utf-8"
    )
    assert_refused(sql_copy, "not in it: jobq.claim(text,bigint,text,interval)")
    template.write_text(
        f"-- jobq {version} → {after}\n-- @replace-function jobq.version()\n\n"
        "-- @replace-function jobq.claim(text, bigint, text, interval)\n",
        encoding="utf-8",
    )
    built = run_tool("build", root=sql_copy)
    assert built.returncode == 0, built.stderr
    install = (sql / f"jobq--{after}.sql").read_text(encoding="utf-8")
    assert install.startswith(f"-- jobq {after} — ") and f"SELECT '{after}'::text" in install
    assert "-- Lease at most n ready jobs" in install
    upgrade = (sql / f"jobq--{version}--{after}.sql").read_text(encoding="utf-8")
    assert upgrade.count("CREATE OR REPLACE FUNCTION") == 2 and f"SELECT '{after}'::text" in upgrade
    assert (sql / f"jobq--{version}.sql").read_bytes() == (SQL_DIR / f"jobq--{version}.sql").read_bytes()
    assert run_tool("check", root=sql_copy).returncode == 0
    frozen = run_tool("freeze", root=sql_copy)
    assert frozen.returncode == 0, frozen.stderr
    assert f"jobq--{after}.sql  " not in RELEASED.read_text(encoding="utf-8")
    assert (sql / "released.sha256").read_text(encoding="utf-8").splitlines()[-2:] == [
        f"{hashlib.sha256((sql / name).read_bytes()).hexdigest()}  {name}"
        for name in (f"jobq--{version}--{after}.sql", f"jobq--{after}.sql")
    ]
    edit(sql / "src/claim.sql", "-- Lease at most n ready jobs", "-- Lease n ready jobs or fewer")
    assert_refused(sql_copy, f"sql/jobq--{after}.sql is released")
