"""``pyqueue dashboard``: serve the web dashboard (``pyqueue.dashboard``) with
uvicorn, and ``pyqueue dashboard --hash-password`` to make a password hash
for HTTP basic.

Nothing of the dashboard's extra (Starlette, Jinja2, uvicorn) is imported
until the command runs: ``pyqueue --help`` and every other command work
without it, and without it this command says what to install (exit 2).
Off loopback the command refuses to start unless authentication is
configured (exit 2, saying why).
"""

from __future__ import annotations

import argparse
import getpass
import importlib.util
import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

from pyqueue.cli.arguments import positive_seconds
from pyqueue.cli.command import EXIT_OK, EXIT_REFUSED, Command, CommandError, connect_dsn, resolve_dsn

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
TOKEN_ENV = "PYQUEUE_DASHBOARD_TOKEN"
SECRET_ENV = "PYQUEUE_DASHBOARD_SECRET"
MIN_SECRET_LENGTH = 32  # characters of the key that signs cookies and CSRF tokens
# What `pip install 'jobq[dashboard]'` brings.
EXTRA_MODULES = ("starlette", "jinja2", "uvicorn", "multipart")
INSTALL_HINT = "pip install 'jobq[dashboard]'"
LOG_LEVELS = ("debug", "info", "warning", "error")


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port {port} is not in 1..65535")
    return port


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}); any non-loopback address "
                        "requires --token-file, $" + TOKEN_ENV + " or --basic-user")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                        help=f"TCP port (default {DEFAULT_PORT})")
    parser.add_argument("--read-only", action="store_true",
                        help="show no action and refuse every POST (pair it with a login holding only "
                        "the jobq_viewer role)")
    parser.add_argument("--token-file", type=Path, metavar="PATH",
                        help="require this file's token (at least 16 characters): as "
                        "'Authorization: Bearer TOKEN' or through the login form; also from $" + TOKEN_ENV)
    parser.add_argument("--secret-file", type=Path, metavar="PATH",
                        help="sign cookies and CSRF tokens with this file's key (at least "
                        f"{MIN_SECRET_LENGTH} characters; also ${SECRET_ENV}), so that several dashboard "
                        "processes behind one address accept each other's; default: a random key per process")
    parser.add_argument("--basic-user", metavar="NAME", help="require HTTP basic auth as NAME")
    parser.add_argument("--password-hash-file", type=Path, metavar="PATH",
                        help="the basic-auth password's hash, made by `pyqueue dashboard --hash-password`")
    parser.add_argument("--hash-password", action="store_true",
                        help="read a password (prompted, or one line on stdin), print its scrypt hash "
                        "for --password-hash-file, and exit")
    parser.add_argument("--refresh", type=positive_seconds, default=5.0, metavar="SECONDS",
                        help="how often pages refresh themselves (default 5, at least 1)")
    parser.add_argument("--root-path", default="", metavar="PATH",
                        help="the URL prefix a reverse proxy serves the dashboard under, e.g. /jobq")
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS,
                        help="uvicorn's log level on stderr (default info: one line per request)")


def require_extra() -> None:
    """CommandError (exit 2) naming the install command when the extra is missing."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise CommandError(f"the dashboard needs the dashboard extra: {INSTALL_HINT} "
                           f"(missing: {', '.join(missing)})", hint=f"Run: {INSTALL_HINT}",
                           exit_code=EXIT_REFUSED)


def is_loopback(host: str) -> bool:
    """Whether host only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def read_secret_file(path: Path, what: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise CommandError(f"cannot read the {what} {path}: {exc.strerror}", exit_code=EXIT_REFUSED) from exc


def chosen_auth(args: argparse.Namespace) -> Any:
    """The TokenAuth or BasicAuth the options ask for, or None."""
    from pyqueue.dashboard.security import BasicAuth, TokenAuth  # noqa: PLC0415  (the extra, only now)

    token = (read_secret_file(args.token_file, "token file") if args.token_file
             else os.environ.get(TOKEN_ENV, "").strip())
    if bool(args.basic_user) != bool(args.password_hash_file):
        raise CommandError("--basic-user and --password-hash-file go together", exit_code=EXIT_REFUSED)
    try:
        if args.basic_user:
            if token:
                raise CommandError("choose one authentication: a token or HTTP basic, not both",
                                   exit_code=EXIT_REFUSED)
            return BasicAuth(args.basic_user, read_secret_file(args.password_hash_file, "password hash file"))
        return TokenAuth(token) if token else None
    except ValueError as exc:
        raise CommandError(str(exc), exit_code=EXIT_REFUSED) from exc


def chosen_secret(args: argparse.Namespace) -> bytes | None:
    """The signing key the options ask for, or None for a random one."""
    secret = (read_secret_file(args.secret_file, "secret file") if args.secret_file
              else os.environ.get(SECRET_ENV, "").strip())
    if not secret:
        if args.secret_file:
            raise CommandError(f"the secret file {args.secret_file} is empty", exit_code=EXIT_REFUSED)
        return None
    if len(secret) < MIN_SECRET_LENGTH:
        raise CommandError(f"the signing secret has {len(secret)} characters; it needs at least "
                           f"{MIN_SECRET_LENGTH}", hint="Make one with: python3 -c 'import secrets; "
                           "print(secrets.token_urlsafe(32))'", exit_code=EXIT_REFUSED)
    return secret.encode()


def hash_password_command() -> int:
    from pyqueue.dashboard.security import hash_password  # noqa: PLC0415

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise CommandError("the two passwords differ", exit_code=EXIT_REFUSED)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CommandError("empty password", exit_code=EXIT_REFUSED)
    print(hash_password(password))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    require_extra()
    if args.hash_password:
        return hash_password_command()
    auth = chosen_auth(args)
    secret = chosen_secret(args)
    if auth is None and not is_loopback(args.host):
        raise CommandError(
            f"refusing to serve the dashboard on {args.host} without authentication: anyone who can reach "
            "that address could see every job and act on the queues",
            hint=f"Pass --token-file PATH (or set {TOKEN_ENV}), or --basic-user NAME --password-hash-file "
            f"PATH, or listen on {DEFAULT_HOST}.", exit_code=EXIT_REFUSED)
    if args.refresh < 1:
        raise CommandError("--refresh must be at least 1 second", exit_code=EXIT_REFUSED)
    dsn, source = resolve_dsn(args)
    connect_dsn(dsn, source).close()  # fail now, clearly, rather than on the first page

    import uvicorn  # noqa: PLC0415  (the extra, only now)

    from pyqueue.dashboard import create_app  # noqa: PLC0415

    app = create_app(dsn, read_only=args.read_only, auth=auth, refresh_seconds=args.refresh, secret=secret)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    notes = [note for note in ("read-only" if args.read_only else "",
                               f"{type(auth).__name__}" if auth else "no authentication") if note]
    print(f"pyqueue dashboard on http://{shown}:{args.port}{args.root_path}/ ({', '.join(notes)})",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            server_header=False, root_path=args.root_path, lifespan="on")
    uvicorn.Server(config).run()
    return EXIT_OK


COMMAND = Command(
    "dashboard", "serve the web dashboard (needs pip install 'jobq[dashboard]')",
    "Serve jobq's web dashboard: every queue's counts and the last hour's throughput, each queue's jobs "
    "(filtered, newest first), a job's payload and errors, schedules and workers, and the operator "
    "actions (retry, cancel, run now, pause/resume, retry dead, bulk) through jobq's SQL functions. "
    f"Listens on {DEFAULT_HOST}:{DEFAULT_PORT} by default; any other address requires a token "
    "(--token-file or $" + TOKEN_ENV + ") or HTTP basic (--basic-user with --password-hash-file).",
    configure, run,
)
