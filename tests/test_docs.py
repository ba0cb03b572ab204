"""Every code block of README.md and docs/*.md runs, as a reader would run it
(see tests/doc_blocks.py for how each kind of block runs and the markers).

A block that stops working fails here. Blocks that must not run carry a
``<!-- not-run: reason -->`` marker: there may be only a few, each with a
reason.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.localserver import find_bindir
from tests.conftest import CRON_DATABASE, default_version, fresh_cron_database, proc_dsn
from tests.doc_blocks import ROOT, Block, block_env, blocks, documents, stray_markers, wants_pg_cron

# "a few": each one is a snippet CI cannot vouch for. Two of them are in
# docs/scaling.md and need what CI has no place for: a worker pointed at a
# PgBouncer, the Citus layout. (Its dashboard on a streaming replica is an
# on-standby block: tests/test_failover.py runs it against a real standby.)
MAX_NOT_RUN = 8
BLOCK_TIMEOUT = 180.0  # seconds for one block (a python or sh block, or one psql paste)
IDLE_TIMEOUT = 90.0  # seconds an until-stopped block gets to work its jobs off
STOP_TIMEOUT = 60.0  # seconds an until-stopped block gets to exit after SIGTERM
SENTINEL = "-- docs: block done --"

DOCS = documents()


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def database_url(proc: PostgreSQLExecutor, dbname: str) -> str:
    """The URL a reader would export as DATABASE_URL."""
    return f"postgresql://{proc.user}@{proc.host}:{proc.port}/{dbname}"


class PsqlSession:
    """One psql process that a document's sql blocks are pasted into, in order."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [str(find_bindir() / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "--no-psqlrc", url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1, env={**os.environ, "PAGER": "cat", "PSQL_PAGER": "cat"},
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def paste(self, block: Block) -> str:
        """Paste one block; return what psql printed, or fail with it."""
        assert self.process.stdin is not None
        self.process.stdin.write(block.text)
        if not block.text.endswith("\n"):
            self.process.stdin.write("\n")
        # a query, not \echo: psql flushes its output after every result
        self.process.stdin.write(f"SELECT '{SENTINEL}' AS docs;\n")
        self.process.stdin.flush()
        printed: list[str] = []
        deadline = time.monotonic() + BLOCK_TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"{block.where}: psql did not finish the block in {BLOCK_TIMEOUT:.0f} s:\n"
                            + "".join(printed))
            if line is None:
                self.process.wait(timeout=10)
                pytest.fail(f"{block.where}: psql stopped (exit {self.process.returncode}) on this "
                            f"block:\n{''.join(printed)}")
            if SENTINEL in line:
                # the rest of the sentinel's result: "(1 row)" and a blank line
                for _ in range(2):
                    self.lines.get(timeout=10)
                return "".join(printed[:-2])  # without the sentinel's header lines
            printed.append(line)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def command(block: Block, scratch: Path) -> tuple[list[str], Path]:
    """How to start a python or sh block, and where."""
    if block.kind == "python":
        script = scratch / f"block_{block.line}.py"
        script.write_text(block.text)
        return [sys.executable, str(script)], scratch
    script = scratch / f"block_{block.line}.sh"
    script.write_text(block.text)
    return ["bash", "-euo", "pipefail", str(script)], ROOT


def run_once(block: Block, scratch: Path, url: str) -> str:
    argv, cwd = command(block, scratch)
    try:
        done = subprocess.run(argv, cwd=cwd, env=block_env(url), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=BLOCK_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT:.0f} s (a block that runs "
                    f"until stopped needs <!-- until-stopped -->): {exc.stdout!r} {exc.stderr!r}")
    if done.returncode != 0:
        pytest.fail(f"{block.where}: exit status {done.returncode}\n--- stdout\n{done.stdout}"
                    f"--- stderr\n{done.stderr}")
    return done.stdout


def totals(url: str, queues: list[str]) -> tuple[int, int]:
    """Completed jobs and failed attempts of these queues, ever."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(completed_total), 0)::bigint, "
                           "coalesce(sum(failed_total), 0)::bigint FROM jobq.stats "
                           "WHERE queue = ANY(%s)", (queues,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def busy_jobs(url: str, queues: list[str]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM jobq.jobs WHERE status IN ('ready', 'running') "
                           "AND queue = ANY(%s)", (queues,)).fetchone()
    assert row is not None
    return int(row[0])


def last_errors(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, queue, last_error FROM jobq.jobs WHERE last_error IS NOT NULL "
                            "ORDER BY id DESC LIMIT 3").fetchall()
    return "\n".join(f"job {r[0]} ({r[1]}): {r[2]}" for r in rows)


def run_until_stopped(block: Block, scratch: Path, url: str) -> str:
    """Start a worker block, wait until its queues are worked off, SIGTERM it."""
    queues = block.queues
    assert queues, f"{block.where}: <!-- until-stopped: QUEUE ... --> names the queues it works"
    completed_before, failed_before = totals(url, queues)
    argv, cwd = command(block, scratch)
    out, err = scratch / f"block_{block.line}.out", scratch / f"block_{block.line}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(argv, cwd=cwd, env=block_env(url), stdin=subprocess.DEVNULL,
                                   stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            deadline = time.monotonic() + IDLE_TIMEOUT
            while busy_jobs(url, queues) > 0 and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            if process.poll() is not None:
                pytest.fail(f"{block.where}: exited by itself (status {process.returncode}) instead of "
                            f"running until stopped\n{out.read_text()}{err.read_text()}")
            if busy_jobs(url, queues) > 0:
                pytest.fail(f"{block.where}: jobs still ready or running after {IDLE_TIMEOUT:.0f} s\n"
                            f"{out.read_text()}{err.read_text()}")
            if block.kind == "sh":
                os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the shell waits for its worker
            else:
                process.send_signal(signal.SIGTERM)
            status = process.wait(timeout=STOP_TIMEOUT)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    printed = out.read_text() + err.read_text()
    assert status == 0, f"{block.where}: exit status {status} after SIGTERM\n{printed}"
    completed_after, failed_after = totals(url, queues)
    assert completed_after > completed_before, f"{block.where}: completed no job of {queues}\n{printed}"
    failed = failed_after - failed_before
    assert failed == 0, f"{block.where}: {failed} failed attempt(s)\n{last_errors(url)}\n{printed}"
    return printed


def create_database(proc: PostgreSQLExecutor, path: Path) -> str:
    """A fresh database for one document; its URL."""
    cron = wants_pg_cron(path)
    name = CRON_DATABASE if cron else "docs_" + re.sub(r"\W", "_", path.stem.lower())
    if cron:
        fresh_cron_database(proc)  # pg_cron's database is emptied, never dropped
    else:
        with psycopg.connect(proc_dsn(proc, "postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url(proc, name)
    if path.name != "README.md":
        with psycopg.connect(url, autocommit=True) as conn:
            if cron:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
            conn.execute("CREATE EXTENSION jobq")
    return url


def database_names(proc: PostgreSQLExecutor) -> set[str]:
    with psycopg.connect(proc_dsn(proc, "postgres"), autocommit=True) as admin:
        return {str(r[0]) for r in admin.execute("SELECT datname FROM pg_database").fetchall()}


def role_names(proc: PostgreSQLExecutor) -> set[str]:
    with psycopg.connect(proc_dsn(proc, "postgres"), autocommit=True) as admin:
        return {str(r[0]) for r in admin.execute("SELECT rolname FROM pg_roles").fetchall()}


def drop_databases(proc: PostgreSQLExecutor, names: set[str], roles: set[str]) -> None:
    if CRON_DATABASE in names:
        fresh_cron_database(proc)  # emptied, never dropped (conftest.fresh_cron_database)
        with psycopg.connect(proc_dsn(proc, CRON_DATABASE), autocommit=True) as conn:
            for role in sorted(roles):  # what they may still hold there (e.g. CONNECT)
                conn.execute(f'DROP OWNED BY "{role}"')
    with psycopg.connect(proc_dsn(proc, "postgres"), autocommit=True) as admin:
        for name in sorted(names - {CRON_DATABASE}):
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for role in sorted(roles):
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture
def extension_files(postgresql_proc: PostgreSQLExecutor) -> None:
    """The docs install jobq with CREATE EXTENSION: its files must be on the server (make install)."""
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as conn:
        available = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'jobq'").fetchone()
    assert available == (default_version(),), (
        "the jobq extension files are not installed on this server (or are stale): run `make install`")


@pytest.fixture
def document_db(postgresql_proc: PostgreSQLExecutor, request: pytest.FixtureRequest,
                extension_files: None) -> Iterator[str]:
    path: Path = request.param
    before, roles_before = database_names(postgresql_proc), role_names(postgresql_proc)
    url = create_database(postgresql_proc, path)
    yield url
    # the document's database, those its blocks made (createdb app ...), and their roles
    new_roles = {r for r in role_names(postgresql_proc) - roles_before if not r.startswith("jobq_")}
    drop_databases(postgresql_proc, database_names(postgresql_proc) - before | {url.rsplit("/", 1)[1]},
                   new_roles)


@pytest.mark.parametrize("document_db", DOCS, ids=doc_id, indirect=True)
def test_every_block_of_the_document_runs(document_db: str, request: pytest.FixtureRequest,
                                          tmp_path: Path) -> None:
    path: Path = request.node.callspec.params["document_db"]
    runnable = [b for b in blocks(path) if b.runs]
    assert runnable or path.name != "README.md", "the README has no runnable block"
    tmp_path.chmod(0o777)
    session: PsqlSession | None = None
    try:
        for block in runnable:
            if block.kind == "sql":
                session = session or PsqlSession(document_db)
                printed = session.paste(block)
            elif block.marker == "until-stopped":
                printed = run_until_stopped(block, tmp_path, document_db)
            else:
                printed = run_once(block, tmp_path, document_db)
            print(f"--- {block.where}\n{printed}")  # what a reader would see (pytest -s, or on failure)
    finally:
        if session is not None:
            session.close()


def test_create_extension_leaves_the_session_as_it_found_it(postgresql_proc: PostgreSQLExecutor,
                                                            extension_files: None) -> None:
    """A reader pastes CREATE EXTENSION jobq, then goes on in the same session
    (CREATE TABLE, CREATE EXTENSION pgtap …): the install script's own
    search_path must not outlive it."""
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS docs_session WITH (FORCE)")
        admin.execute("CREATE DATABASE docs_session")
    try:
        with psycopg.connect(proc_dsn(postgresql_proc, "docs_session"), autocommit=True) as conn:
            before = conn.execute("SHOW search_path").fetchone()
            conn.execute("CREATE EXTENSION jobq")
            after = conn.execute("SHOW search_path").fetchone()
            assert after == before, f"CREATE EXTENSION jobq left search_path = {after}, was {before}"
    finally:
        with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS docs_session WITH (FORCE)")


ALL_BLOCKS = [b for path in DOCS for b in blocks(path)]


def test_every_block_says_its_language() -> None:
    unknown = [f"{b.where}: {b.language or '(none)'}" for b in ALL_BLOCKS if b.kind is None]
    assert not unknown, ("code blocks need one of the languages sql, psql, python, sh, bash, text "
                         f"(text never runs): {unknown}")


def test_few_blocks_are_not_run_and_each_says_why() -> None:
    skipped = [b for b in ALL_BLOCKS if b.marker == "not-run"]
    assert len(ALL_BLOCKS) > 20, "the docs lost their examples"
    without_reason = [b.where for b in skipped if len(b.reason) < 10]
    assert not without_reason, f"not-run markers need a reason: {without_reason}"
    assert len(skipped) <= MAX_NOT_RUN, (
        f"{len(skipped)} blocks are not run (at most {MAX_NOT_RUN}): "
        + "; ".join(f"{b.where} ({b.reason})" for b in skipped))
    misplaced = [b.where for b in ALL_BLOCKS if b.marker and b.kind == "text"]
    assert not misplaced, f"text blocks never run, a marker on them means nothing: {misplaced}"


def test_markers_sit_right_before_a_code_block() -> None:
    stray = {doc_id(p): lines for p in DOCS if (lines := stray_markers(p))}
    assert not stray, f"run markers not followed by a code block: {stray}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (heading := re.match(r"^#{1,6}\s+(.*)$", line)):
            found.add(slug(heading.group(1)))
        found.update(re.findall(r'<a id="([^"]+)"', line))
    return found


def test_links_between_the_documents_resolve() -> None:
    broken = []
    for path in DOCS:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{doc_id(path)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{doc_id(path)}: {target} (no such heading)")
    assert not broken, broken


def make_targets_named(block: Block) -> list[str]:
    """The targets of every `make a b c  # comment` line of a block."""
    lines = re.findall(r"^\s*make\s+([^#\n]*)", block.text, re.MULTILINE)
    return [word for line in lines for word in line.split() if re.fullmatch(r"[a-z][\w-]*", word)]


def test_every_make_target_the_docs_name_exists() -> None:
    named = sorted({t for b in ALL_BLOCKS if b.kind == "sh" for t in make_targets_named(b)})
    assert "test" in named and "install" in named, named
    missing = []
    for target in named:
        done = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True,
                              check=False, env={**os.environ, "MAKEFLAGS": ""})
        if done.returncode != 0 or "No rule to make target" in done.stderr:
            missing.append(f"{target}: {done.stderr.strip()}")
    assert not missing, missing
