"""Shared fixtures: one real PostgreSQL server per test session (pg_cron
loaded), a template database with jobq installed, and a fresh copy of that
template for every test.

Under pytest-xdist (``make test-pytest`` runs ``-n PYTEST_WORKERS``) each
worker process is a session of its own, so it starts its own server:
pytest-postgresql gives each a free port (claimed through a file in the
run's shared temporary directory), a data directory under the worker's
own basetemp, and stops it when the worker ends. Nothing is shared between
workers but the machine: pg_cron's one database per server, roles and
fixed database names are each worker's own."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path

import psycopg
import pytest
from _pytest.nodeid import NodeId  # pytest 9.2: a node's id, which pytest-xdist 3.8 cannot set
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.localserver import find_bindir
from tests.ports import forget_claims, start_claims

ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = ROOT / "sql"
CRON_DATABASE = "jobq_cron"  # the one database where CREATE EXTENSION pg_cron works


def default_version() -> str:
    """The version jobq.control installs by default."""
    control = (SQL_DIR / "jobq.control").read_text()
    found = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    assert found, "default_version missing from sql/jobq.control"
    return found.group(1)


def install_jobq(  # noqa: PLR0917 - the signature of a pytest-postgresql loader
    host: str, port: int, user: str, dbname: str, password: str | None, autocommit: bool = True
) -> None:
    """Install the current jobq version into a database (the template, or one a test made)."""
    script = (SQL_DIR / f"jobq--{default_version()}.sql").read_text()
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, password=password,
                         autocommit=True) as conn:
        conn.execute(script.encode())


def printable(text: str) -> str:
    """``text`` with lone surrogates written as escapes: valid UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process makes the run's port claims directory
    (tests/ports.py) before it starts any xdist process."""
    if not hasattr(config, "workerinput"):
        start_claims()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        forget_claims()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test's report with its captured output in valid UTF-8. pytest-xdist's
    workers send each report to the controller as UTF-8, and a lone surrogate
    (tests/test_client_input.py logs one on purpose) would end the worker."""
    report: pytest.TestReport = yield
    report.sections = [(title, printable(text)) for title, text in report.sections]
    if report.longrepr is not None and printable(str(report.longrepr)) != str(report.longrepr):
        report.longrepr = printable(str(report.longrepr))
    return report


# The longest tests, and the groups pytest-xdist runs on one process (their
# modules' xdist_group marks), longest first: each is a prefix of node ids. A
# parallel run hands tests out in collection order, so these start first and
# none is left running alone at the end (`make test`'s wall time). Measured
# with --durations on a quiet machine (2026-11-27, 4 workers);
# tests/test_run_order.py keeps every entry naming a test.
LONG_FIRST = (
    "tests/test_docs.py::test_every_block_of_the_document_runs[docs/performance.md]",
    "tests/test_worker.py::test_recovers_after_the_database_refused_connections",
    "tests/test_restart.py::test_restarts_mid_load_lose_no_committed_job",
    "tests/test_bench.py::",
    "tests/test_examples.py::test_psql_workers_finish_each_job_exactly_once",
    "tests/test_dashboard_browser.py::",
    "tests/test_periodic.py::test_pg_cron_runs_the_periodic_job",
    "tests/test_dashboard_browser_security.py::",
    "tests/test_docs.py::test_every_block_of_the_document_runs[docs/python.md]",
    "tests/test_bench_programs.py::test_a_bench_program_stopped_by_sigterm_stops_what_it_started",
    "tests/test_failover.py::",
    "tests/test_faults.py::test_workers_sigkilled_at_random_moments_lose_no_job",
    "tests/test_docs.py::test_every_block_of_the_document_runs[docs/cli.md]",
    "tests/test_pooler_fleet.py::test_idle_polling_workers_stretch_their_interval",
    "tests/test_bench_programs.py::test_the_queue_grants_benchmark_measures_every_workload_on_every_configuration",
    "tests/test_workflow_concurrency.py::test_diamond_graph_with_failures_and_a_killed_worker",
    "tests/test_dashboard_http_security.py::test_off_loopback_without_authentication_it_refuses_to_start",
    "tests/test_bench_programs.py::test_the_cold_start_benchmark_stopped_by_sigterm_stops_what_it_started",
    "tests/test_operator.py::test_cli_cancel_one_job_with_id_and_refusals",
    "tests/test_docs.py::test_every_block_of_the_document_runs[docs/tutorial.md]",
    "tests/test_plans.py::",
    "tests/test_bad_input.py::",
    "tests/test_dashboard_bench.py::",
)


def long_first_rank(nodeid: str) -> int:
    """Where a test starts in the run: its place in LONG_FIRST, or after them all."""
    return next((i for i, prefix in enumerate(LONG_FIRST) if nodeid.startswith(prefix)), len(LONG_FIRST))


def xdist_group(item: pytest.Item) -> str | None:
    """The names of an item's xdist_group marks, joined as pytest-xdist joins them."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests of LONG_FIRST first, in its order; the others as collected
    (a stable sort: every xdist process computes the same order).

    In an xdist process under --dist loadgroup, every test of an xdist_group
    gets the group's ``@name`` suffix on its node id, which the scheduler
    groups by. pytest-xdist 3.8 sets it through ``item._nodeid``, which pytest
    9.2 no longer reads (its node id is ``item._id``): the groups were split
    over the processes, and a module-scoped fixture built once per process."""
    if getattr(config.option, "loadgroup", False):
        for item in items:
            group = xdist_group(item)
            if group is not None and not item.nodeid.endswith(f"@{group}"):
                item._id = NodeId.parse(f"{item.nodeid}@{group}")
    items.sort(key=lambda item: long_first_rank(item.nodeid))


postgresql_proc = factories.postgresql_proc(
    executable=str(find_bindir() / "pg_ctl"),
    port=None,
    postgres_options=(
        f"-c shared_preload_libraries=pg_cron -c cron.database_name={CRON_DATABASE} "
        "-c max_connections=300 -c fsync=off -c synchronous_commit=off"
    ),
    load=[install_jobq],
)
postgresql = factories.postgresql("postgresql_proc")


def proc_dsn(proc: PostgreSQLExecutor, dbname: str) -> str:
    """A libpq connection string to a database of the session server."""
    return make_conninfo(host=proc.host, port=proc.port, user=proc.user, dbname=dbname)


@pytest.fixture
def dsn(postgresql: psycopg.Connection[tuple[object, ...]], postgresql_proc: PostgreSQLExecutor) -> str:
    """The DSN of this test's fresh database (jobq installed)."""
    return proc_dsn(postgresql_proc, postgresql.info.dbname)


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection to this test's database."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


def fresh_cron_database(proc: PostgreSQLExecutor) -> str:
    """CRON_DATABASE (pg_cron's cron.database_name) with pg_cron installed and
    nothing else: no pg_cron job, no jobq, an empty public schema; its DSN.
    Neither the database nor pg_cron is ever dropped: DROP DATABASE ... WITH
    (FORCE) ends pg_cron's launcher, which exits cleanly, so the postmaster
    never starts it again and no later test would see pg_cron run a job (and
    dropping the extension under a running launcher is not worth the risk)."""
    with psycopg.connect(proc_dsn(proc, "postgres"), autocommit=True) as admin:
        if admin.execute("SELECT FROM pg_database WHERE datname = %s", (CRON_DATABASE,)).fetchone() is None:
            admin.execute(f'CREATE DATABASE "{CRON_DATABASE}"')
    dsn = proc_dsn(proc, CRON_DATABASE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        conn.execute("SELECT cron.unschedule(jobid) FROM cron.job")
        conn.execute("DROP EXTENSION IF EXISTS jobq CASCADE")
        conn.execute("DROP SCHEMA IF EXISTS jobq CASCADE")
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
    return dsn
