"""The generated SQL reference and SQLSTATE table (tools/sql_docs.py, `make docs`):
current with the installed schema, complete, and refusing a schema or an
exception map it cannot document."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest

from pyqueue.errors import ERRORS_BY_SQLSTATE, JobqError
from tools.sql_catalog import direct_codes, read_catalog, split_body
from tools.sql_docs import (
    BEGIN,
    END,
    ERRORS_DOC,
    REFERENCE,
    ROOT,
    DocsError,
    generate,
    groups,
    problems,
    render_reference,
    shorter_defaults,
    sqlstates,
    stale,
    with_table,
)

Conn = psycopg.Connection[tuple[object, ...]]


def between_markers(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def test_the_committed_reference_and_table_are_current(conn: Conn) -> None:
    expected = generate(conn)
    outdated = stale(expected)
    diffs = "".join(
        "".join(list(difflib.unified_diff((ROOT / p).read_text().splitlines(keepends=True),
                                          expected[p].splitlines(keepends=True), str(p), "generated"))[:40])
        for p in outdated)
    assert not outdated, f"{', '.join(map(str, outdated))} stale: run make docs\n{diffs}"


def test_the_stale_check_sees_a_changed_comment(conn: Conn, tmp_path: Path) -> None:
    for path in (REFERENCE, ERRORS_DOC):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    assert stale(generate(conn, tmp_path), tmp_path) == []
    conn.execute("COMMENT ON FUNCTION jobq.reset_queue(text) IS 'Forgets what a queue was told.'")
    changed = generate(conn, tmp_path)
    assert stale(changed, tmp_path) == [REFERENCE]
    assert "Forgets what a queue was told." in changed[REFERENCE]


def test_every_public_function_view_and_type_has_a_comment(conn: Conn) -> None:
    catalog = read_catalog(conn)
    assert len(catalog.public_functions) >= 38 and len(catalog.views) >= 4, "jobq lost public objects"
    assert problems(catalog) == []
    uncommented = [f.label for f in catalog.public_functions if not f.comment.strip()]
    uncommented += [v.name for v in (*catalog.views, *catalog.types) if v.public and not v.comment.strip()]
    assert uncommented == []
    reference = (ROOT / REFERENCE).read_text()
    for function in catalog.public_functions:
        assert f"`jobq.{function.name}({shorter_defaults(function.arguments)})`" in reference
        assert function.comment in reference, f"{function.label}: its comment is not in the reference"
    for view in catalog.views:
        if view.public:  # a private view (jobq._queue_defaults) is not in the reference
            assert f"### `jobq.{view.name}`" in reference and view.comment in reference


def test_a_missing_comment_fails_the_generator(conn: Conn) -> None:
    conn.execute("COMMENT ON FUNCTION jobq.version() IS NULL")
    conn.execute("COMMENT ON FUNCTION jobq.claim(text[], bigint, text, interval) IS ''")
    conn.execute("COMMENT ON VIEW jobq.stats IS NULL")
    conn.execute("COMMENT ON TYPE jobq.job IS NULL")
    with pytest.raises(DocsError) as refused:
        generate(conn)
    assert refused.value.problems == [
        "jobq.claim(queues text[], n bigint, worker text, lease interval) has no COMMENT",
        "jobq.version() has no COMMENT",
        "type jobq.job has no COMMENT",
        "view jobq.stats has no COMMENT",
    ]


def test_a_public_function_no_jobq_role_may_call_fails_the_generator(conn: Conn) -> None:
    conn.execute("CREATE FUNCTION jobq.lonely() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    conn.execute("REVOKE ALL ON FUNCTION jobq.lonely() FROM PUBLIC")
    conn.execute("COMMENT ON FUNCTION jobq.lonely() IS 'Nobody calls it.'")
    with pytest.raises(DocsError, match=r"jobq\.lonely\(\) is public .* no jobq role may call it"):
        render_reference(read_catalog(conn))
    conn.execute("GRANT EXECUTE ON FUNCTION jobq.lonely() TO jobq_admin")
    assert "Nobody calls it." in render_reference(read_catalog(conn))


def test_functions_are_grouped_by_what_the_catalog_says(conn: Conn) -> None:
    by_group = {slug: {f.name for f in members} for slug, members in groups(read_catalog(conn)).items()}
    assert list(by_group) == ["producer", "worker", "monitoring", "operator", "periodic", "maintenance",
                              "any"]
    assert by_group["monitoring"] == {"metrics"}
    assert {"enqueue", "enqueue_many", "enqueue_callback"} == by_group["producer"]
    assert {"claim", "complete", "fail", "heartbeat", "take", "hold"} <= by_group["worker"]
    assert {"retry", "cancel", "configure_queue", "pause"} <= by_group["operator"]
    assert {"every", "unschedule", "enqueue_periodic", "run_schedules"} == by_group["periodic"]
    assert {"reap", "prune", "schedule_maintenance", "unschedule_maintenance"} == by_group["maintenance"]
    assert by_group["any"] == {"version", "status", "result", "parent_results", "watch"}
    # a function only jobq_admin may call is an operator's; granted to jobq_worker, a worker's
    conn.execute("CREATE FUNCTION jobq.tally() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    conn.execute("REVOKE ALL ON FUNCTION jobq.tally() FROM PUBLIC")
    conn.execute("GRANT EXECUTE ON FUNCTION jobq.tally() TO jobq_admin")
    assert "tally" in {f.name for f in groups(read_catalog(conn))["operator"]}
    conn.execute("GRANT EXECUTE ON FUNCTION jobq.tally() TO jobq_worker")
    assert "tally" in {f.name for f in groups(read_catalog(conn))["worker"]}


def test_every_sqlstate_raised_has_a_python_exception_and_a_row(conn: Conn) -> None:
    catalog = read_catalog(conn)
    raised = {code for f in catalog.functions for code in direct_codes(f)}
    assert raised == set(ERRORS_BY_SQLSTATE), "SQL codes and pyqueue.errors differ"
    rows = sqlstates(catalog)
    assert [r.code for r in rows] == sorted(raised)
    table = between_markers((ROOT / ERRORS_DOC).read_text())
    for row in rows:
        assert row.raised_by, f"{row.code}: no public function raises it"
        line = next((x for x in table.splitlines() if f'<a id="{row.code.lower()}"></a>' in x), None)
        assert line is not None, f"{row.code} has no row in {ERRORS_DOC}: run make docs"
        assert f"`{row.exception.__name__}`" in line and row.raised_for in line
    enqueue = {r.code for r in rows if "enqueue" in r.raised_by}
    assert {"JQ001", "JQ002", "JQ003", "JQ004", "JQ005", "JQ006", "JQ009"} <= enqueue


class Undocumented(JobqError):
    """JQ098: a code no jobq function raises."""

    SQLSTATE = "JQ098"


class Orphaned(JobqError):
    """JQ097: a code only a private helper nobody calls raises."""

    SQLSTATE = "JQ097"


def test_sql_and_python_codes_that_do_not_match_fail_the_generator(conn: Conn) -> None:
    conn.execute("""CREATE FUNCTION jobq.explode() RETURNS void LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = 'JQ099'; END $$""")
    conn.execute("""CREATE FUNCTION jobq._orphan() RETURNS void LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'lost' USING ERRCODE = 'JQ097'; END $$""")
    classes = {**ERRORS_BY_SQLSTATE, "JQ098": Undocumented, "JQ097": Orphaned}
    with pytest.raises(DocsError) as refused:
        sqlstates(read_catalog(conn), classes)
    assert refused.value.problems == [
        "JQ097 is raised only by jobq._orphan(), which no public function calls",
        "JQ099 is raised by jobq.explode() but has no class in pyqueue.errors",
        "pyqueue.errors.Undocumented maps JQ098, which no jobq function raises",
    ]
    with pytest.raises(DocsError) as refused:
        generate(conn)  # with the real map, pyqueue.errors: every problem at once
    assert {"jobq.explode() has no COMMENT",
            "JQ099 is raised by jobq.explode() but has no class in pyqueue.errors",
            "JQ097 is raised by jobq._orphan() but has no class in pyqueue.errors",
            } <= set(refused.value.problems)


def test_calls_and_codes_are_read_from_code_not_comments_or_strings() -> None:
    body = split_body("""
        -- PERFORM jobq.ghost(); RAISE USING ERRCODE = 'JQ001';
        /* jobq.phantom() */
        PERFORM jobq._check_queue(p_queue, 'queue');   -- JQ001
        v := 'jobq.not_a_call() ''quoted'' $x$';
        EXECUTE $q$SELECT jobq.dynamic()$q$;
        RAISE EXCEPTION 'bad' USING ERRCODE = 'JQ002';
    """)
    assert re.findall(r"jobq\.(\w+)\(", body.code) == ["_check_queue"]
    assert "jobq.not_a_call() 'quoted' $x$" in body.strings and "SELECT jobq.dynamic()" in body.strings
    assert re.findall(r"'(JQ\d+)'", body.text) == ["JQ002"]


def test_the_table_goes_between_the_markers_and_only_there() -> None:
    document = f"# Errors\n\nprose\n\n{BEGIN}\nold table\n{END}\n\nmore prose\n"
    once = with_table(document, "| new |\n")
    assert once == f"# Errors\n\nprose\n\n{BEGIN}\n| new |\n{END}\n\nmore prose\n"
    assert with_table(once, "| new |\n") == once
    with pytest.raises(DocsError, match="lacks the lines"):
        with_table("# Errors\n\nno markers\n", "| new |\n")


def test_make_docs_installs_the_latest_script_and_runs_the_generator() -> None:
    done = subprocess.run(["make", "-n", "-C", str(ROOT), "docs"], capture_output=True, text=True,
                          check=False, env={**os.environ, "MAKEFLAGS": ""})
    assert done.returncode == 0, done.stderr
    control = (ROOT / "sql" / "jobq.control").read_text()
    version = re.search(r"default_version\s*=\s*'([^']+)'", control)
    assert version is not None
    assert f"sql/jobq--{version.group(1)}.sql" in done.stdout and "-m tools.sql_docs" in done.stdout
