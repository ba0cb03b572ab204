"""Each test's fresh database, made ahead: a thread of the test process
copies the template (CREATE DATABASE ... TEMPLATE) while the tests run, and
drops each database after its test, so that no test waits for its own
CREATE DATABASE or for the last test's DROP DATABASE (together about 0.3 s a
test on the shared 2-core machine, for some 1,300 tests).

Every test still gets a database of its own, copied from the template and
used by no test before it: only the time it is made at changes. The names
start with PREFIX; tests/test_docs.py leaves them alone when it drops the
databases a document made."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import psycopg
from psycopg import sql

PREFIX = "pooled_"
AHEAD = 2  # databases kept ready: one for the next test, one for a quick one after it
TAKE_TIMEOUT = 300.0  # seconds a test waits for its database before it fails
POOLS = itertools.count(1)  # a process's pools: their databases' names differ


class DatabasePool:
    """Fresh copies of ``template``, made ahead and dropped after use by one thread."""

    def __init__(self, admin_dsn: str, template: str, ahead: int = AHEAD) -> None:
        self.admin_dsn, self.template, self.ahead = admin_dsn, template, ahead
        self.ready: list[str] = []  # made, not yet handed out (oldest first)
        self.used: list[str] = []  # handed back: to drop
        self.made = 0
        self.names = f"{PREFIX}{next(POOLS)}_"
        self.closing = False
        self.failure: BaseException | None = None
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._work, name="database-pool", daemon=True)
        self.thread.start()

    def take(self) -> str:
        """A fresh database's name: made from the template, never handed out before."""
        with self.changed:
            if not self.changed.wait_for(lambda: self.ready or self.failure is not None, TAKE_TIMEOUT):
                raise TimeoutError(f"no fresh database in {TAKE_TIMEOUT:.0f} s")
            if self.failure is not None:
                raise RuntimeError("the database pool's thread failed") from self.failure
            name = self.ready.pop(0)
            self.changed.notify_all()
            return name

    def give_back(self, name: str) -> None:
        """``name``'s test is over: the thread drops it (its connections ended first)."""
        with self.changed:
            self.used.append(name)
            self.changed.notify_all()

    def close(self) -> None:
        """Drop every database of the pool and stop its thread."""
        with self.changed:
            self.closing = True
            self.changed.notify_all()
        self.thread.join(timeout=TAKE_TIMEOUT)

    def _steps(self) -> Iterator[tuple[str, str]]:
        """("make", name) while fewer than ``ahead`` are ready, ("drop", name)
        for each one handed back; making comes first, as a test may be waiting."""
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.closing or self.used or len(self.ready) < self.ahead)
                if self.closing:
                    self.used += self.ready
                    self.ready = []
                if not self.closing and len(self.ready) < self.ahead:
                    self.made += 1
                    step = ("make", f"{self.names}{self.made}")
                elif self.used:
                    step = ("drop", self.used.pop(0))
                else:
                    return
            yield step

    def _work(self) -> None:
        try:
            for kind, name in self._steps():
                with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
                    if kind == "make":
                        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                            sql.Identifier(name), sql.Identifier(self.template)))
                        with self.changed:
                            self.ready.append(name)
                            self.changed.notify_all()
                    else:  # no new connection, then end those left (a test's stray process), then drop
                        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(
                            sql.Identifier(name)))
                        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        except BaseException as exc:  # handed to the test that waits (take)
            with self.changed:
                self.failure = exc
                self.changed.notify_all()
