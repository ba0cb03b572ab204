"""``pyqueue worker MODULE:ATTR``: import the handler (or a configured
``pyqueue.Worker``), check the database, log a startup line and run until
SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from datetime import timedelta
from typing import Any

import pyqueue
from pyqueue import defaults
from pyqueue.cli.arguments import delay_seconds, positive_int, positive_seconds
from pyqueue.cli.command import EXIT_OK, EXIT_REFUSED, Command, CommandError, connect_dsn, resolve_dsn
from pyqueue.worker.observer import METRICS_HOST, MetricsError

WORKER_OPTIONS = ("concurrency", "batch_size", "lease", "poll_interval", "max_poll_interval", "listen_dsn",
                  "name", "shutdown_timeout", "metrics_port", "metrics_host")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_worker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="MODULE:ATTR",
                        help="a pyqueue.Worker instance (run as configured), or a handler function "
                        "taking a pyqueue.Job, registered for every --queue; MODULE is imported from "
                        "--app-dir (the current directory by default), e.g. myapp.jobs:send_email "
                        "for ./myapp/jobs.py")
    parser.add_argument("--app-dir", default=".", metavar="DIR",
                        help="directory to import MODULE from: put first on sys.path (default: the "
                        "current directory)")
    parser.add_argument("--queue", "-q", dest="queues", action="append", default=[], metavar="Q",
                        help="queue to work on (repeat for several); required with a handler function")
    parser.add_argument("--concurrency", type=positive_int, metavar="N",
                        help=f"jobs handled at once, one thread each (default {defaults.CONCURRENCY})")
    parser.add_argument("--batch-size", type=positive_int, metavar="N",
                        help=f"jobs claimed per round trip (default {defaults.BATCH_SIZE})")
    parser.add_argument("--lease", type=positive_seconds, metavar="SECONDS",
                        help="lease per claimed job (default: the queue's setting)")
    parser.add_argument("--poll-interval", type=positive_seconds, metavar="SECONDS",
                        help="how often to look for jobs when no notification comes "
                        f"(default {defaults.POLL_INTERVAL:g})")
    parser.add_argument("--max-poll-interval", type=positive_seconds, metavar="SECONDS",
                        help="the longest wait between polls once empty polls have stretched it (doubling "
                        f"from --poll-interval, with jitter; default {defaults.MAX_POLL_INTERVAL:g})")
    parser.add_argument("--no-listen", action="store_true",
                        help="poll only, without LISTEN/NOTIFY (e.g. behind PgBouncer in transaction mode)")
    parser.add_argument("--listen-dsn", metavar="DSN",
                        help="a direct connection for LISTEN wake-ups while --dsn goes through PgBouncer "
                        "in transaction mode (claims and acks go through the pooler, without prepared "
                        "statements)")
    parser.add_argument("--name", metavar="NAME",
                        help="worker name recorded on claimed jobs (default host:pid)")
    parser.add_argument("--shutdown-timeout", type=delay_seconds, metavar="SECONDS",
                        help="after SIGTERM or Ctrl-C, how long running jobs may take to finish; then "
                        "they are failed (the attempt counts), jobs not started are released, and the "
                        f"worker exits (default {defaults.SHUTDOWN_TIMEOUT:g})")
    parser.add_argument("--no-schedules", action="store_true",
                        help="do not run the periodic jobs scheduled for workers (jobq.every with "
                        "runner 'workers'); by default every worker runs them, each tick once")
    parser.add_argument("--metrics-port", type=tcp_port, metavar="N",
                        help="serve Prometheus metrics on http://HOST:N/metrics while the worker runs: its "
                        "handlers' durations, pickup delays and jobs in flight, and jobq's metrics read from "
                        "the database at each scrape (needs prometheus-client: pip install "
                        "'jobq[metrics]'; 0: any free port, logged)")
    parser.add_argument("--metrics-host", metavar="HOST",
                        help=f"address to serve the metrics on (default {METRICS_HOST}: this machine only)")
    parser.add_argument("--otel", action="store_true",
                        help="trace every job with OpenTelemetry (pyqueue.tracing.instrument() with the "
                        "global tracer provider, which you set up: in the handler's module, or with "
                        "opentelemetry-instrument; needs pip install 'jobq[otel]')")
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS,
                        help="what the worker logs on stderr: a startup line, shutdown and reconnections "
                        "at INFO/WARNING, a line per failed attempt that will be retried at WARNING, "
                        "a job that goes dead (with its traceback) at ERROR (default INFO)")


def tcp_port(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from exc
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 0 to 65535, got {value}")
    return value


def load_target(spec: str, app_dir: str = ".") -> object:
    """The object named by MODULE:ATTR (ATTR may be dotted), importing
    MODULE with ``app_dir`` first on sys.path."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"expected MODULE:ATTR, got {spec!r}", exit_code=EXIT_REFUSED,
                           hint="For example: pyqueue worker myapp.tasks:send_email --queue emails")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        folder, _, file = module_name.removesuffix(".py").rpartition("/")
        dotted = module_name.removesuffix(".py").replace("/", ".").strip(".")
        hint = f"For ./{module_name}: pyqueue worker {dotted}:{attr}"
        if folder:
            hint += f" (a package), or pyqueue worker {file}:{attr} --app-dir {folder}"
        raise CommandError(f"MODULE is a Python module name, not a file path: got {module_name!r}",
                           exit_code=EXIT_REFUSED, hint=hint + ".")
    directory = os.path.abspath(app_dir)
    if not os.path.isdir(directory):
        raise CommandError(f"--app-dir {app_dir}: no such directory", exit_code=EXIT_REFUSED)
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:
        if not not_found(exc, module_name):  # MODULE was found; an import inside it failed
            traceback.print_exc()
            raise CommandError(f"importing {module_name} failed: {exc}", exit_code=EXIT_REFUSED,
                               hint=f"The traceback above shows where, inside {module_name}.") from exc
        path = os.path.join(directory, *module_name.split("."))
        raise CommandError(
            f"cannot import {module_name} (looked for {path}.py or {path}/__init__.py, "
            f"and installed packages): {exc}", exit_code=EXIT_REFUSED,
            hint=f"MODULE is imported from {directory} (--app-dir, default the current directory); "
            "run from your project's root or pass --app-dir.") from exc
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise CommandError(f"{module_name} has no attribute {attr}", exit_code=EXIT_REFUSED) from exc
    return found


def not_found(error: ImportError, module_name: str) -> bool:
    """Whether ``error`` says MODULE itself (or a package above it) is missing,
    rather than something MODULE imports."""
    parts = module_name.split(".")
    return isinstance(error, ModuleNotFoundError) and error.name in {
        ".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def run_worker(args: argparse.Namespace) -> int:
    target = load_target(args.target, args.app_dir)
    dsn, source = resolve_dsn(args)
    options: dict[str, Any] = {name: getattr(args, name) for name in WORKER_OPTIONS
                               if getattr(args, name) is not None}
    if args.lease is not None:
        options["lease"] = timedelta(seconds=args.lease)
    if args.no_listen:
        options["use_listen"] = False
    if args.no_schedules:
        options["run_schedules"] = False
    if args.metrics_host is not None and args.metrics_port is None:
        raise CommandError("--metrics-host needs --metrics-port", exit_code=EXIT_REFUSED)
    if isinstance(target, pyqueue.Worker):
        if args.queues or options or getattr(args, "dsn", None):
            raise CommandError(
                f"{args.target} is a configured Worker: --queue, --dsn and the worker options apply to "
                "handler functions only", exit_code=EXIT_REFUSED,
                hint="Set them where the Worker is created, or point at a handler function.")
        worker, source = target, f"the Worker {args.target}"
    elif callable(target):
        if not args.queues:
            raise CommandError(f"{args.target} is a handler function: name its queues with --queue",
                               exit_code=EXIT_REFUSED)
        try:
            worker = pyqueue.Worker(dsn, **options)
        except ImportError as exc:  # --metrics-port without prometheus-client
            raise CommandError(str(exc), exit_code=EXIT_REFUSED) from exc
        except ValueError as exc:  # e.g. --max-poll-interval under --poll-interval
            raise CommandError(str(exc), exit_code=EXIT_REFUSED,
                               hint="See `pyqueue worker --help` for each option's range.") from exc
        for queue in args.queues:
            worker.register(queue, target)
    else:
        raise CommandError(f"{args.target} is neither a pyqueue.Worker nor callable", exit_code=EXIT_REFUSED)
    with connect_dsn(worker.dsn, source):  # an unreachable database said with the DSN and where it came from
        pass
    if args.otel:
        try:
            from pyqueue import tracing  # noqa: PLC0415  (only when asked for: it imports OpenTelemetry)
        except ImportError as exc:
            raise CommandError(str(exc), exit_code=EXIT_REFUSED) from exc
        tracing.instrument()
    # worker.run() checks jobq (not installed: an error with a hint) and logs the startup line.
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT)
    try:
        worker.run(handle_signals=True)
    except MetricsError as exc:
        raise CommandError(str(exc), hint="Choose another --metrics-port.") from exc
    return EXIT_OK


COMMAND = Command(
    "worker", "run a worker until SIGTERM or Ctrl-C",
    "Run jobs with a handler: MODULE:ATTR names either a pyqueue.Worker instance, run as "
    "configured, or a function taking a pyqueue.Job, registered for every --queue. A handler "
    "that returns completes its job; one that raises fails it (retried with backoff, then "
    "dead-lettered). It logs a startup line (queues, settings, database, versions) and a line "
    "per job that goes dead. SIGTERM or Ctrl-C stops claiming, lets running jobs finish for up to "
    "--shutdown-timeout seconds (then fails them), releases the jobs not started and exits 0. "
    "Workers also run the periodic jobs scheduled with runner 'workers' (jobq 0.4). With "
    "--metrics-port it serves Prometheus metrics (the worker's and jobq's) while it runs.",
    configure_worker, run_worker,
)
