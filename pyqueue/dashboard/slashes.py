"""The dashboard's trailing-slash redirect, with a relative ``Location``.

Starlette's router sends a path that matches a route only with (or without)
a trailing slash to that path with a 307, but as an absolute URL built from
the request's ``Host`` header, which the client chooses: ``Host: evil.com``
made ``Location: http://evil.com/queues/emails`` (issue 25). A relative
Location (the path and the query string) is what the browser resolves
against the address it really used; nothing in it comes from a header.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import Receive, Scope, Send

PATH_SAFE = "/!$&'()*+,;=:@-._~"  # RFC 3986 pchar and "/", less "%": a literal % is encoded


def relative_location(scope: Scope) -> str | None:
    """``scope``'s path (and query) as a relative URL, or None when a
    browser would read it as another host's (``//host/…``)."""
    path = quote(str(scope["path"]), safe=PATH_SAFE)
    if not path.startswith("/") or path.startswith("//"):
        return None
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    return f"{path}?{query}" if query else path


class SlashRedirect:
    """The router's ``default`` (with ``redirect_slashes`` off): a 307 to the
    same path with the trailing slash removed or added, when that path has
    a route; the router's 404 otherwise."""

    def __init__(self, router: Router) -> None:
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = str(scope["path"])
            root = str(scope.get("root_path", ""))
            if (path[len(root):] if path.startswith(root) else path) != "/":
                other = dict(scope, path=path.rstrip("/") if path.endswith("/") else path + "/")
                if any(route.matches(other)[0] is not Match.NONE for route in self.router.routes):
                    location = relative_location(other)
                    if location is not None:
                        await RedirectResponse(location, status_code=307)(scope, receive, send)
                        return
        await self.router.not_found(scope, receive, send)
