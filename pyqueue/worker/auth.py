"""Which database errors a worker must not retry: authentication and
authorisation failures. A wrong password, a role that does not exist or may
not log in, a database the role may not connect to, or a role without jobq's
grants will not get better by reconnecting, so the workers raise them from
``run()`` / ``listen()`` at once instead of logging "database connection
lost" and backing off for ever.
"""

from __future__ import annotations

import re

import psycopg

# invalid_password, invalid_authorization_specification, insufficient_privilege
FATAL_SQLSTATES = frozenset({"28P01", "28000", "42501"})

# libpq reports a refused connection without a SQLSTATE (psycopg's error has
# sqlstate None): recognise the server's messages for those same codes.
_REFUSED = re.compile(
    r"password authentication failed|authentication failed for user|no password supplied"
    r'|role "[^"]*" does not exist|is not permitted to log in|pg_hba\.conf'
    r"|permission denied for database"
)


def fatal_error(error: BaseException) -> bool:
    """True for an authentication or authorisation failure (retrying is pointless)."""
    if not isinstance(error, psycopg.Error):
        return False
    if error.sqlstate is not None:
        return error.sqlstate in FATAL_SQLSTATES
    return isinstance(error, psycopg.OperationalError) and _REFUSED.search(str(error)) is not None


def raise_if_fatal(error: BaseException) -> None:
    """Re-raise ``error`` when it is an authentication or authorisation failure."""
    if fatal_error(error):
        raise error
