"""pyqueue is laid out by role, and the layout holds.

The top level of ``pyqueue/`` is the core API (connection helpers,
enqueue/claim, Job, errors, defaults, schema); each subfolder is a package
for one role: ``worker/`` (the consumer loop and the Worker), ``cli/`` (the
``pyqueue`` command), ``bench/`` (the benchmarks), ``dashboard/`` (the web UI).
These tests read the tree, so a new package is held to the same rules:

- every folder of modules is a package whose ``__init__`` says what it holds;
- a module holds one idea, whatever its length (the whole acknowledgement
  path in one module beats five 40-line ones); ``MAX_LINES`` only catches
  a module that has grown past any one idea (the client calls that
  ``tools/client_calls.py`` writes from their statement builders are not
  counted);
- no pyqueue module imports itself back through others (no import circle,
  whether the import is at module level, for type checking or in a function);
- the core imports no role package (except the entry points that re-export
  the worker or run the command line), and a role package imports no other
  one but the worker at module level;
- the benchmarks and the dashboard stay out of everything else: ``import
  pyqueue``, a Worker running in-process (sync and asyncio) and a ``pyqueue
  worker`` process load no ``pyqueue`` package but the worker (and the CLI,
  for the command), no matplotlib and nothing of the dashboard's extra.
"""

from __future__ import annotations

import ast
import inspect
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg

import pyqueue
import pyqueue.aio
import pyqueue.client
from tests.conftest import ROOT
from tests.worker_support import wait_until
from tools import client_calls

Connection = psycopg.Connection[tuple[object, ...]]
PACKAGE = ROOT / "pyqueue"
MAX_LINES = 600  # a ceiling for one idea, not a size to split at: split along a real seam, never by count
ROLE_PACKAGES = ("worker", "cli", "bench", "dashboard")  # at least these
# The core modules that may import a role package: the public entry points
# re-export the worker (pyqueue.Worker, pyqueue.aio.AsyncWorker) or run the CLI.
ENTRY_POINTS = {"__init__.py": {"worker"}, "aio.py": {"worker"}, "__main__.py": {"cli"}}
# What a running worker may load of pyqueue's role packages; any other (bench,
# later dashboard) is for its own command only.
WORKER_PACKAGES = ("pyqueue.worker",)
COMMAND_PACKAGES = ("pyqueue.worker", "pyqueue.cli")
SHARED_PACKAGES = ("worker",)  # the role packages others may import at module level
# Heavy optional dependencies: the bench chart, the dashboard's web stack; and
# OpenTelemetry, loaded only by pyqueue.tracing (issue 27: nothing imported until asked for).
NEVER_IN_A_WORKER = ("matplotlib", "starlette", "jinja2", "uvicorn", "prometheus_client", "opentelemetry")
RUN_TIMEOUT = 120  # seconds a probe process may take


def modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def role_packages() -> list[str]:
    """The subfolders of pyqueue/ that hold Python modules."""
    return sorted({path.relative_to(PACKAGE).parts[0] for path in modules() if path.parent != PACKAGE})


def test_every_role_is_a_package_that_says_what_it_holds() -> None:
    found = role_packages()
    assert set(ROLE_PACKAGES) <= set(found), f"pyqueue/ should have the packages {ROLE_PACKAGES}, has {found}"
    folders = sorted({path.parent for path in modules() if path.parent != PACKAGE})
    problems = []
    for folder in folders:
        init = folder / "__init__.py"
        where = init.relative_to(ROOT)
        if not init.exists():
            problems.append(f"{folder.relative_to(ROOT)}/ has modules but no __init__.py")
        elif not (ast.get_docstring(ast.parse(init.read_text())) or "").strip():
            problems.append(f"{where} has no docstring saying what the package holds")
    assert not problems, "\n".join(problems)


def hand_written_lines(path: Path) -> int:
    """The lines of a module, less the calls tools/client_calls.py writes there."""
    text = path.read_text()
    before, begin, rest = text.partition(client_calls.BEGIN)
    if begin:
        text = before + rest.partition(client_calls.END)[2]
    return len(text.splitlines())


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {path: hand_written_lines(path) for path in modules()}
    over = sorted((lines, str(path.relative_to(ROOT))) for path, lines in sizes.items() if lines > MAX_LINES)
    assert not over, (f"modules over {MAX_LINES} lines (more than one idea? split them along a real seam):\n"
                      + "\n".join(f"  {name}: {lines} lines" for lines, name in reversed(over)))


def imported_pyqueue_modules(path: Path) -> set[str]:
    """The pyqueue modules a module imports when it is loaded (module-level
    imports; an import inside a function runs only when it is called)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
            found.add(node.module)
    return {name for name in found if name == "pyqueue" or name.startswith("pyqueue.")}


def roles_imported(path: Path, packages: list[str]) -> set[str]:
    """The role packages (of ``packages``) a module imports at module level."""
    return {parts[1] for parts in (name.split(".") for name in imported_pyqueue_modules(path))
            if len(parts) > 1 and parts[1] in packages}


def test_the_core_imports_no_role_package_and_only_the_worker_is_shared() -> None:
    """The core imports no role package; a role package imports, at module
    level, only the core, the worker and itself: the benchmarks (and any
    later tool package) are imported where they are used, never on the way."""
    packages, problems = role_packages(), []
    for path in modules():
        name = str(path.relative_to(ROOT))
        home = path.relative_to(PACKAGE).parts[0] if path.parent != PACKAGE else None
        roles = roles_imported(path, packages)
        if home is None:
            if wrong := sorted(roles - ENTRY_POINTS.get(path.name, set())):
                problems.append(f"{name} (core) imports pyqueue.{', pyqueue.'.join(wrong)}")
        elif others := sorted(roles - {home, *SHARED_PACKAGES}):
            problems.append(f"{name} imports pyqueue.{', pyqueue.'.join(others)} at module level "
                            "(import it where it is used)")
    assert not problems, "\n".join(problems)


def forbidden(loaded: list[str], allowed_packages: tuple[str, ...]) -> list[str]:
    """The modules of ``loaded`` a worker must not have loaded."""
    tops = [f"pyqueue.{role}" for role in role_packages() if f"pyqueue.{role}" not in allowed_packages]
    tops += NEVER_IN_A_WORKER
    return sorted(module for module in loaded
                  if any(module == top or module.startswith(f"{top}.") for top in tops))


def assert_none_loaded(found: list[str], who: str) -> None:
    packages = sorted({".".join(name.split(".")[:2]) if name.startswith("pyqueue.") else name.split(".")[0]
                       for name in found})
    assert not found, (f"{who} loaded {', '.join(packages)} ({len(found)} modules): import them only "
                       "where they are used")


IN_PROCESS_PROBE = '''
import asyncio, json, sys, threading

import psycopg

import pyqueue
import pyqueue.aio

dsn, out = sys.argv[1], sys.argv[2]
handled = threading.Event()


def handle(job: pyqueue.Job) -> None:
    handled.set()


async def handle_async(job: pyqueue.aio.AsyncJob) -> None:
    done.set()


with psycopg.connect(dsn, autocommit=True) as conn:
    pyqueue.enqueue(conn, "layout", {})
    pyqueue.enqueue(conn, "layout-aio", {})
worker = pyqueue.Worker(dsn, poll_interval=0.2)
worker.register("layout", handle)
thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
thread.start()
if not handled.wait(60):
    sys.exit("the Worker handled no job")
worker.stop()
thread.join(60)


async def run_async() -> None:
    global done
    done = asyncio.Event()
    aworker = pyqueue.aio.AsyncWorker(dsn, poll_interval=0.2)
    aworker.register("layout-aio", handle_async)
    task = asyncio.create_task(aworker.run(handle_signals=False))
    await asyncio.wait_for(done.wait(), 60)
    aworker.stop()
    await asyncio.wait_for(task, 60)


asyncio.run(run_async())
with open(out, "w") as file:
    json.dump(sorted(sys.modules), file)
'''


def test_import_and_in_process_workers_never_load_the_benchmarks(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    # -c: the checkout (cwd) comes first on sys.path, so this is its pyqueue.
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(IN_PROCESS_PROBE), dsn, str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(out.read_text())
    assert "pyqueue.worker" in loaded and "pyqueue.client" in loaded  # the probe really ran a worker
    assert_none_loaded(forbidden(loaded, WORKER_PACKAGES), "import pyqueue, pyqueue.aio and running workers")
    with psycopg.connect(dsn, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM jobq.jobs WHERE queue LIKE 'layout%%' "
                            "AND status <> 'completed'").fetchone()
    assert left == (0,)


HANDLER_MODULE = '''
import json, sys


def record(job):
    """Write what this worker process has loaded, while it runs a job."""
    with open(job.payload["out"], "w") as file:
        json.dump(sorted(sys.modules), file)
'''


def test_a_pyqueue_worker_process_never_loads_the_benchmarks(dsn: str, tmp_path: Path) -> None:
    (tmp_path / "layout_probe.py").write_text(textwrap.dedent(HANDLER_MODULE))
    out = tmp_path / "modules.json"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT jobq.enqueue('layout', %s::jsonb)", (json.dumps({"out": str(out)}),))
    worker = subprocess.Popen(
        [sys.executable, "-m", "pyqueue", "worker", "layout_probe:record", "--queue", "layout",
         "--app-dir", str(tmp_path), "--poll-interval", "0.2", "--dsn", dsn],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: out.exists() and out.read_text().endswith("]"), "the worker to run the probe job",
                   timeout=RUN_TIMEOUT)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            _, stderr = worker.communicate(timeout=RUN_TIMEOUT)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    assert worker.returncode == 0, stderr
    loaded = json.loads(out.read_text())
    assert {"pyqueue.cli", "pyqueue.worker", "layout_probe"} <= set(loaded)  # it really was that process
    assert_none_loaded(forbidden(loaded, COMMAND_PACKAGES), "a `pyqueue worker` process")


def test_each_client_call_and_its_async_twin_are_functions_of_their_own(conn: Connection) -> None:
    """pyqueue.client and pyqueue.aio hold one plain function per call (written
    from its statement builder of pyqueue._statements): each has the call's
    own name (a traceback shows it), documentation and signature, ``conn``
    first, and is defined in its module (jump-to-definition lands on it)."""
    calls = [name for name in pyqueue.client.__all__ if name[0].islower()]
    homes = {"wait": "pyqueue.waiting", "chain": "pyqueue.workflows", "group": "pyqueue.workflows"}
    for name in calls:
        sync, twin = getattr(pyqueue.client, name), getattr(pyqueue.aio, name)
        parameters = list(inspect.signature(sync).parameters)
        assert parameters[0] == "conn" and list(inspect.signature(twin).parameters) == parameters, name
        assert sync.__name__ == twin.__name__ == name and sync.__doc__ and twin.__doc__, name
        assert inspect.iscoroutinefunction(twin) or name == "take", name
        assert (sync.__module__, twin.__module__) == (homes.get(name, "pyqueue.client"),
                                                      homes.get(name, "pyqueue._aioclient")), name
        if name not in homes and name != "take":  # take: a context manager, its code is the generator's
            assert sync.__code__.co_name == twin.__code__.co_name == name, name
    assert str(inspect.signature(pyqueue.enqueue)) == (
        "(conn: 'Connection', queue: 'str', payload: 'Mapping[str, Any]', *, "
        "delay: 'timedelta | float | None' = None, run_at: 'datetime | None' = None, priority: 'int' = 0, "
        "max_attempts: 'int | None' = None, key: 'str | None' = None, group_key: 'str | None' = None, "
        "timeout: 'timedelta | float | None' = None, unique_for: 'timedelta | float | None' = None, "
        "depends_on: 'Iterable[int] | None' = None, on_parent_failure: 'str' = 'cancel', "
        "meta: 'Mapping[str, Any] | None' = None, fair_key: 'str | None' = None, "
        "on_duplicate: 'str' = 'keep') -> 'int'")
    assert str(inspect.signature(pyqueue.aio.claim)).endswith("-> 'list[AsyncJob]'")
    by_name: Any = pyqueue.enqueue  # conn may be passed by name, as the signature says
    job_id = by_name(conn=conn, queue="layout", payload={})
    assert pyqueue.cancel(conn, job_id) is True


def test_the_checks_catch_what_they_guard(tmp_path: Path) -> None:
    """The rules are not vacuous: a benchmark module, the CLI or matplotlib
    in a worker's modules is caught, and imports are read as Python does."""
    assert forbidden(["pyqueue", "pyqueue.bench", "pyqueue.bench.suite", "matplotlib.pyplot"],
                     WORKER_PACKAGES) == ["matplotlib.pyplot", "pyqueue.bench", "pyqueue.bench.suite"]
    assert forbidden(["pyqueue.cli.worker"], WORKER_PACKAGES) == ["pyqueue.cli.worker"]
    assert forbidden(["pyqueue.cli.dashboard", "pyqueue.dashboard.app", "starlette.routing"],
                     COMMAND_PACKAGES) == ["pyqueue.dashboard.app", "starlette.routing"]
    assert forbidden(["pyqueue.cli.worker", "pyqueue.worker.sync_worker"], COMMAND_PACKAGES) == []
    probe = tmp_path / "probe.py"
    probe.write_text("from pyqueue.bench import suite\nfrom pyqueue import client\n\n"
                     "def later():\n    import pyqueue.cli\n")
    assert imported_pyqueue_modules(probe) == {"pyqueue", "pyqueue.bench", "pyqueue.bench.suite",
                                               "pyqueue.client"}
    assert roles_imported(probe, role_packages()) == {"bench"}


def test_the_client_calls_are_written_from_their_builders(tmp_path: Path) -> None:
    """The calls between the markers of pyqueue/client.py and _aioclient.py are
    what tools/client_calls.py writes from the statement builders (run
    ``make client`` after changing a builder), and a changed builder makes
    both stale."""
    assert client_calls.stale() == [], "run make client: the client calls differ from their builders"
    for path in [*client_calls.BUILDERS, client_calls.SYNC.path, client_calls.ASYNC.path]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    builders = tmp_path / "pyqueue/_statements.py"
    builders.write_text(builders.read_text().replace("def retry(job_id: int)",
                                                     "def retry(job_id: int, n: int = 1)"))
    assert client_calls.stale(tmp_path) == [client_calls.SYNC.path, client_calls.ASYNC.path]
    assert "def retry(conn: Connection, job_id: int, n: int = 1) -> bool:" in client_calls.written(
        client_calls.SYNC, tmp_path)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(here: str, source: str, known: set[str], *, is_package: bool = False) -> set[str]:
    """The modules (of ``known``) that module ``here`` imports anywhere in its
    ``source``: at module level, under ``if TYPE_CHECKING``, or inside a
    function. A name imported from a module counts as that module; ``from
    pyqueue import x`` as ``pyqueue.x`` when that is a module, else as ``pyqueue``."""
    package = here.split(".") if is_package else here.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                     for alias in node.names]
        else:
            continue
        for imported in names:
            name = imported
            while name and name not in known:  # pyqueue.job.Job -> pyqueue.job
                name = name.rpartition(".")[0]
            if name and name != here:
                found.add(name)
    return found


def import_circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The modules that import one another, directly or through others: the
    strongly connected components of ``graph`` with more than one module."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: set[frozenset[str]] = set()

    def visit(module: str) -> None:  # Tarjan's algorithm
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            component: set[str] = set()
            while not component or module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                circles.add(frozenset(component))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return circles


def pyqueue_import_graph() -> dict[str, set[str]]:
    known = {module_name(path) for path in modules()}
    return {module_name(path): imports_of(module_name(path), path.read_text(), known,
                                          is_package=path.name == "__init__.py")
            for path in modules()}


def test_no_pyqueue_modules_import_one_another() -> None:
    """No import circle: a module imported (even lazily, even for types) by a
    module it imports cannot be read, tested or moved on its own."""
    circles = import_circles(pyqueue_import_graph())
    assert not circles, sorted(map(sorted, circles))


def test_the_circle_check_finds_circles() -> None:
    """Circles are found whatever kind of import closes them; a chain is none."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_circles(graph) == {frozenset({"a", "b", "c"})}
    source = ("from typing import TYPE_CHECKING\nfrom pyqueue import _db, errors\nfrom . import defaults\n"
              "if TYPE_CHECKING:\n    from pyqueue.job import Job\n\n"
              "def later():\n    import pyqueue.worker.consumer\n    from pyqueue.probe import x\n")
    known = {"pyqueue", "pyqueue._db", "pyqueue.defaults", "pyqueue.errors", "pyqueue.job", "pyqueue.worker",
             "pyqueue.worker.consumer", "pyqueue.probe"}
    assert imports_of("pyqueue.probe", source, known) == {
        "pyqueue._db", "pyqueue.defaults", "pyqueue.errors", "pyqueue.job", "pyqueue.worker.consumer"}
