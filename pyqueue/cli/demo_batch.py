"""The scene of ``pyqueue demo``: its sizes, the queues' settings, the
handlers (a little simulated work; an SMTP server busy twice, an unknown
currency) and the batch it enqueues in one transaction."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

import pyqueue

QUEUES = ("emails", "thumbnails", "invoices")
HISTORY = 3600  # seconds the demo's completed jobs stay in jobq.jobs (history is opt-in)
BACKOFF_BASE = 0.5  # seconds: first retry delay on the demo queues
BACKOFF_CAP = 2.0  # seconds: longest retry delay on the demo queues
BACKOFF_JITTER = 0.25  # fraction: delays are scaled by a random factor in [0.75, 1]
POISON_MAX_ATTEMPTS = 3  # attempts before the poison invoice is dead-lettered
URGENT_PRIORITY = -10  # password resets: lower numbers run first
STORY_PRIORITY = -5  # the delayed, flaky and poison jobs: run when due, not behind the backlog
WORK = {"emails": (0.1, 0.3), "thumbnails": (0.3, 0.8), "invoices": (0.2, 0.5)}  # seconds of simulated work
CURRENCIES = ("EUR", "USD", "GBP")


@dataclass(frozen=True)
class Profile:
    """How big the demo is."""

    newsletters: int  # ordinary emails, priority 0
    password_resets: int  # urgent emails, enqueued last
    thumbnails: int
    invoices: int
    work_scale: float  # multiplies WORK
    delay: float  # seconds before the month-end report may run
    workers: int
    concurrency: int  # handler threads per worker

    @property
    def total(self) -> int:
        # + the flaky email, the poison invoice and the delayed report
        return self.newsletters + self.password_resets + self.thumbnails + self.invoices + 3


FULL = Profile(newsletters=200, password_resets=5, thumbnails=150, invoices=100, work_scale=1.0, delay=8.0,
               workers=3, concurrency=2)
SMALL = Profile(newsletters=20, password_resets=3, thumbnails=10, invoices=8, work_scale=0.1, delay=2.0,
                workers=2, concurrency=2)


@dataclass
class Specials:
    """The ids of the jobs the story is about."""

    flaky: int
    poison: int
    report: int


# --- the handlers: what the workers do ---------------------------------------

class SmtpTemporaryError(Exception):
    """An SMTP 4xx answer: try again later."""


def simulate(queue: str, scale: float) -> None:
    low, high = WORK[queue]
    time.sleep(random.uniform(low, high) * scale)


def make_handlers(profile: Profile) -> dict[str, Callable[[pyqueue.Job], None]]:
    """One handler per queue; each does a little simulated work."""

    def send_email(job: pyqueue.Job) -> None:
        if job.payload.get("smtp") == "busy" and job.attempts <= 2:
            raise SmtpTemporaryError("421 4.7.0 mx.example.com busy, try again later")
        simulate("emails", profile.work_scale)

    def make_thumbnail(job: pyqueue.Job) -> None:
        simulate("thumbnails", profile.work_scale)

    def render_invoice(job: pyqueue.Job) -> None:
        currency = job.payload.get("currency", "EUR")
        if currency not in CURRENCIES:
            raise ValueError(f"invoice {job.payload.get('invoice')}: unsupported currency {currency!r}")
        simulate("invoices", profile.work_scale)

    return {"emails": send_email, "thumbnails": make_thumbnail, "invoices": render_invoice}


# --- setting the scene ---------------------------------------------------------

def configure_queues(conn: psycopg.Connection[Any]) -> None:
    """Quick retries, and an hour of history: the story told at the end is
    read from the completed jobs, which jobq keeps only when asked."""
    for queue in QUEUES:
        pyqueue.configure_queue(conn, queue, backoff_base=timedelta(seconds=BACKOFF_BASE),
                                backoff_cap=timedelta(seconds=BACKOFF_CAP), backoff_jitter=BACKOFF_JITTER,
                                retention=timedelta(seconds=HISTORY))


def enqueue_batch(conn: psycopg.Connection[Any], profile: Profile) -> Specials:
    """The whole batch, in one transaction: it appears to the workers at once."""
    rng = random.Random(42)
    with conn.transaction():
        pyqueue.enqueue_many(conn, "emails", [
            {"to": f"reader{n}@example.com", "template": "newsletter"} for n in range(profile.newsletters)])
        pyqueue.enqueue_many(conn, "thumbnails", [
            {"image": f"uploads/IMG_{4000 + n}.jpg", "size": rng.choice(["128x128", "512x512"])}
            for n in range(profile.thumbnails)])
        pyqueue.enqueue_many(conn, "invoices", [
            {"invoice": 2000 + n, "customer": f"customer-{rng.randint(1, 60)}",
             "currency": rng.choice(CURRENCIES), "amount": round(rng.uniform(20, 2000), 2)}
            for n in range(profile.invoices)])
        flaky = pyqueue.enqueue(conn, "emails", {"to": "ops@example.com", "template": "weekly-report",
                                                 "smtp": "busy"}, priority=STORY_PRIORITY)
        poison = pyqueue.enqueue(conn, "invoices", {"invoice": 1042, "customer": "globex", "currency": "XXX",
                                                    "amount": 99.5}, max_attempts=POISON_MAX_ATTEMPTS,
                                 priority=STORY_PRIORITY)
        report = pyqueue.enqueue(conn, "invoices", {"report": "month-end", "month": "2026-11"},
                                 delay=timedelta(seconds=profile.delay), priority=STORY_PRIORITY)
        pyqueue.enqueue_many(conn, "emails", [
            {"to": f"user{n}@example.com", "template": "password-reset"}
            for n in range(profile.password_resets)],
            priority=URGENT_PRIORITY)
    return Specials(flaky=flaky, poison=poison, report=report)
