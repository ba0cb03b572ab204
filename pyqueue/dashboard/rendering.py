"""Turning data into the dashboard's HTML: the Jinja2 environment (autoescape
always on: payloads, errors, queue names and keys are text, never markup),
its filters, flash messages carried across a redirect, and ``render``, which
every page goes through.
"""

from __future__ import annotations

import base64
import hmac
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from pyqueue.dashboard.security import Signer, csrf_token_of, set_cookies

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
FLASH_COOKIE = "pyqueue_flash"


def format_time(value: datetime | None) -> str:
    """A timestamp in UTC to the second, or an em dash."""
    if value is None:
        return "—"
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def format_duration(value: timedelta | None) -> str:
    """A duration as 2d 3h, 4m 5s, 1m, 1.2s; an em dash for None."""
    if value is None:
        return "—"
    seconds = value.total_seconds()
    if seconds < 0:
        return "-" + format_duration(-value)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next(index for index, (amount, _) in enumerate(parts) if amount)
    shown = [f"{amount}{unit}" for amount, unit in parts[first:first + 2] if amount]
    return " ".join(shown)


def pretty_json(value: Any) -> str:
    """JSON indented for reading (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def make_environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                     undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.filters["time"] = format_time
    environment.filters["duration"] = format_duration
    environment.filters["pretty_json"] = pretty_json
    return environment


def path_to(request: Request, name: str, **params: Any) -> str:
    """The path of a named route, under the prefix the app is mounted at."""
    root = str(request.scope.get("root_path", ""))
    return root + str(request.app.url_path_for(name, **{k: str(v) for k, v in params.items()}))


def set_flash(request: Request, response: Response, text: str, *, error: bool = False) -> None:
    """Show text in #flash on the next page this browser loads (a signed cookie)."""
    signer: Signer = request.app.state.signer
    body = base64.urlsafe_b64encode(json.dumps({"text": text, "error": error}).encode()).decode()
    response.set_cookie(FLASH_COOKIE, f"{body}.{signer.sign('flash', body)}", httponly=True,
                        samesite="strict", path=str(request.scope.get("root_path", "")) or "/",
                        max_age=60, secure=request.url.scheme == "https")


def take_flash(request: Request) -> dict[str, Any] | None:
    """The flash message set by the previous action, if genuine."""
    cookie = request.cookies.get(FLASH_COOKIE, "")
    body, _, mac = cookie.partition(".")
    signer: Signer = request.app.state.signer
    if not body or not hmac.compare_digest(mac, signer.sign("flash", body)):
        return None
    try:
        found = json.loads(base64.urlsafe_b64decode(body))
    except ValueError:
        return None
    return found if isinstance(found, dict) and isinstance(found.get("text"), str) else None


def render(request: Request, template: str, context: dict[str, Any], *,
           status_code: int = 200) -> HTMLResponse:
    """A page: template with context, plus what every page needs (settings,
    CSRF token, the flash message, links)."""
    settings = request.app.state.settings
    flash = take_flash(request)
    page = {
        "request": request,
        "read_only": settings.read_only,
        "refresh_seconds": settings.refresh_seconds,
        "csrf_token": csrf_token_of(request),
        "flash": flash,
        "path_to": lambda name, **params: path_to(request, name, **params),
        "static": lambda name: path_to(request, "static", path=name),
        "login_enabled": settings.token_login,
        **context,
    }
    environment: jinja2.Environment = request.app.state.templates
    html = environment.get_template(template).render(page)
    response = HTMLResponse(html, status_code=status_code)
    set_cookies(request, response)
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path=str(request.scope.get("root_path", "")) or "/")
    return response


def error_page(request: Request, status_code: int, title: str, detail: str) -> HTMLResponse:
    """The page shown for a refused or failed request (never a traceback)."""
    try:
        return render(request, "error.html", {"status": status_code, "title": title, "detail": detail},
                      status_code=status_code)
    except Exception:  # the error page itself must not fail: plain HTML, escaped by hand
        import html  # noqa: PLC0415

        body = (f"<!doctype html><title>{status_code} {html.escape(title)}</title><main id=\"error\">"
                f"<h1>{status_code} {html.escape(title)}</h1><p>{html.escape(detail)}</p></main>")
        return HTMLResponse(body, status_code=status_code)
