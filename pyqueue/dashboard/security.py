"""The dashboard's defences: who may see it, which forms it accepts, and the
headers every response carries.

- Authentication (optional, required off loopback): a bearer token
  (``Authorization: Bearer …``, or the login form, which sets an HttpOnly,
  SameSite=Strict cookie holding an HMAC of the token, never the token), or
  HTTP basic against a scrypt hash made by ``pyqueue dashboard
  --hash-password``. Every comparison is constant-time.
- CSRF, signed double submit: the first page sets the cookie
  ``pyqueue_csrf`` (a random nonce and its HMAC under the app's secret);
  every form carries the same value in the hidden field ``csrf_token``. A
  POST whose field is missing, differs from the cookie or is not signed by
  this app is refused with 403 before anything runs. Another site can
  neither read the cookie nor mint a signed value.
- Headers: a Content-Security-Policy allowing only this origin's script and
  style (no inline script, no framing), nosniff, no referrer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "pyqueue_csrf"
CSRF_FIELD = "csrf_token"
SESSION_COOKIE = "pyqueue_session"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1  # ~16 MiB, some 50 ms per hash
SCRYPT_PREFIX = "scrypt"
MIN_TOKEN_LENGTH = 16  # characters; shorter tokens are refused
OPEN_PATHS = ("/login", "/static/")  # reachable without authentication
SECURITY_HEADERS = {
    "content-security-policy": ("default-src 'self'; script-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                                "form-action 'self'; frame-ancestors 'none'"),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


@dataclass(frozen=True)
class TokenAuth:
    """Every request needs this token: as ``Authorization: Bearer TOKEN`` or
    through the login form (a session cookie)."""

    token: str

    def __post_init__(self) -> None:
        if len(self.token) < MIN_TOKEN_LENGTH or self.token != self.token.strip():
            raise ValueError(f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters, "
                             "without surrounding whitespace")


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic: this user name and a password matching ``password_hash``
    (from :func:`hash_password`)."""

    user: str
    password_hash: str

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user:
            raise ValueError("the basic-auth user name must be non-empty and contain no ':'")
        parse_hash(self.password_hash)  # refuses a malformed hash now, not at the first request


Auth = TokenAuth | BasicAuth


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str) -> str:
    """A salted scrypt hash of password: ``scrypt$N$r$p$salt$hash``."""
    if not password:
        raise ValueError("the password is empty")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    return f"{SCRYPT_PREFIX}${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def parse_hash(encoded: str) -> tuple[int, int, int, bytes, bytes]:
    """The parameters, salt and digest of a hash made by hash_password; ValueError if malformed."""
    parts = encoded.strip().split("$")
    try:
        if len(parts) != 6 or parts[0] != SCRYPT_PREFIX:
            raise ValueError
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
    except ValueError:
        raise ValueError("not a password hash made by `pyqueue dashboard --hash-password` "
                         "(expected scrypt$N$r$p$salt$hash)") from None
    if not (2 <= n <= 2**20 and 1 <= r <= 32 and 1 <= p <= 16 and salt and digest):
        raise ValueError("password hash parameters out of range")
    return n, r, p, salt, digest


def verify_password(password: str, encoded: str) -> bool:
    """Whether password matches the hash (constant-time comparison)."""
    n, r, p, salt, digest = parse_hash(encoded)
    found = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=2**27, dklen=len(digest))
    return hmac.compare_digest(found, digest)


class Signer:
    """HMACs under the app's secret: CSRF tokens, the session cookie, flash messages."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def sign(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, f"{purpose}\0{value}".encode(), hashlib.sha256).hexdigest()

    def new_csrf_token(self) -> str:
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self.sign('csrf', nonce)}"

    def csrf_token_valid(self, token: str) -> bool:
        nonce, _, mac = token.partition(".")
        return bool(nonce) and hmac.compare_digest(mac, self.sign("csrf", nonce))

    def session_value(self, token: str) -> str:
        return self.sign("session", token)


def csrf_token_of(request: Request) -> str:
    """The CSRF token of this browser (its cookie), or a new one the response will set."""
    current = request.cookies.get(CSRF_COOKIE, "")
    signer: Signer = request.app.state.signer
    if current and signer.csrf_token_valid(current):
        return current
    token: str = request.state.new_csrf_token if hasattr(request.state, "new_csrf_token") else ""
    if not token:
        token = signer.new_csrf_token()
        request.state.new_csrf_token = token
    return token


def set_cookies(request: Request, response: Response) -> None:
    """Set the CSRF cookie when this request made a new token."""
    token = getattr(request.state, "new_csrf_token", "")
    if token:
        response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path=cookie_path(request),
                            secure=request.url.scheme == "https")


def cookie_path(request: Request) -> str:
    return str(request.scope.get("root_path", "")) or "/"


async def csrf_ok(request: Request, submitted: str | None) -> bool:
    """Whether a POST's csrf_token field matches this browser's signed cookie."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    signer: Signer = request.app.state.signer
    return (bool(submitted) and bool(cookie) and hmac.compare_digest(str(submitted), cookie)
            and signer.csrf_token_valid(cookie))


class Authenticator:
    """Decides whether a request is authenticated under the configured auth."""

    def __init__(self, auth: Auth | None, signer: Signer) -> None:
        self.auth = auth
        self._signer = signer
        self._verified: set[str] = set()  # digests of basic credentials already verified (scrypt is slow)

    def allows(self, request: Request) -> bool:
        auth = self.auth
        if auth is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if isinstance(auth, TokenAuth):
            if scheme.lower() == "bearer" and self.token_matches(value.strip()):
                return True
            cookie = request.cookies.get(SESSION_COOKIE, "")
            return bool(cookie) and hmac.compare_digest(cookie, self._signer.session_value(auth.token))
        if scheme.lower() != "basic":
            return False
        return self._basic_ok(value.strip(), auth)

    def _basic_ok(self, value: str, auth: BasicAuth) -> bool:
        key = hashlib.sha256(f"{auth.password_hash}\0{value}".encode()).hexdigest()
        if key in self._verified:
            return True
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        user_ok = hmac.compare_digest(user.encode(), auth.user.encode())
        password_ok = verify_password(password, auth.password_hash)
        if user_ok and password_ok:
            if len(self._verified) > 100:
                self._verified.clear()
            self._verified.add(key)
            return True
        return False

    def token_matches(self, submitted: str) -> bool:
        auth = self.auth
        return isinstance(auth, TokenAuth) and hmac.compare_digest(submitted.encode(), auth.token.encode())


class SecurityMiddleware:
    """Adds SECURITY_HEADERS to every response and refuses unauthenticated
    requests: basic auth gets 401 with a challenge, token auth sends browsers
    to the login form (and other clients a 401)."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.decode().lower() not in SECURITY_HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = headers
            await send(message)

        request = Request(scope)
        relative = scope["path"][len(scope.get("root_path", "")):] if scope["path"].startswith(
            scope.get("root_path", "")) else scope["path"]
        if not relative.startswith(OPEN_PATHS) and not self.authenticator.allows(request):
            await self.refusal(request)(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def refusal(self, request: Request) -> Response:
        if isinstance(self.authenticator.auth, BasicAuth):
            return Response("authentication required\n", status_code=401, media_type="text/plain",
                            headers={"www-authenticate": 'Basic realm="jobq dashboard", charset="UTF-8"'})
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            root = str(request.scope.get("root_path", ""))
            return Response(status_code=303, headers={"location": f"{root}/login"})
        return Response("authentication required: send Authorization: Bearer TOKEN\n", status_code=401,
                        media_type="text/plain",
                        headers={"www-authenticate": 'Bearer realm="jobq dashboard"'})
