"""What ``pyqueue demo`` tells at the end, read from the database: who did
the work, priorities, the delayed job, the retries with their backoff, the
dead letter."""

from __future__ import annotations

import shutil
import textwrap
from typing import Any

import psycopg

from pyqueue.cli.demo_batch import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    BACKOFF_JITTER,
    URGENT_PRIORITY,
    Profile,
    Specials,
)

TEXT_WIDTH = 100  # characters per line of the story, at most (narrower terminals: their width)


def wrap(text: str, first: str, rest: str) -> str:
    """text wrapped to the terminal (at most TEXT_WIDTH columns)."""
    width = min(TEXT_WIDTH, shutil.get_terminal_size((TEXT_WIDTH, 24)).columns - 1)
    return textwrap.fill(text, width=width, initial_indent=first, subsequent_indent=rest)


def last_line(error: str | None) -> str:
    """The exception line of a traceback, without the exception's module."""
    lines = [line.strip() for line in (error or "").strip().splitlines() if line.strip()]
    if not lines:
        return "(no error recorded)"
    name, colon, message = lines[-1].partition(":")
    return f"{name.rsplit('.', 1)[-1]}{colon}{message}" if " " not in name else lines[-1]


def seconds_list(backoffs: dict[int, float]) -> str:
    return ", then ".join(f"{backoffs[attempt]:.2f} s" for attempt in sorted(backoffs))


def narrative(conn: psycopg.Connection[Any], profile: Profile, specials: Specials,
              backoffs: dict[int, dict[int, float]]) -> list[str]:
    lines = []
    per_worker = conn.execute(
        "SELECT coalesce(worker, '?'), count(*) FROM jobq.jobs WHERE status = 'completed' "
        "GROUP BY 1 ORDER BY 1").fetchall()
    lines.append("shared work: " + ", ".join(f"{name} completed {count}" for name, count in per_worker))

    waits = dict(conn.execute(
        "SELECT priority, avg(extract(epoch FROM started_at - created_at))::float8 FROM jobq.jobs "
        "WHERE queue = 'emails' AND status = 'completed' AND attempts = 1 GROUP BY priority").fetchall())
    if URGENT_PRIORITY in waits and 0 in waits:
        lines.append(
            f"priority: {profile.password_resets} password-reset emails (priority {URGENT_PRIORITY}) were "
            f"enqueued after {profile.newsletters} newsletters yet started "
            f"{waits[URGENT_PRIORITY]:.2f} s after enqueue on average; newsletters waited {waits[0]:.2f} s")

    row = conn.execute("SELECT extract(epoch FROM started_at - created_at)::float8 FROM jobq.jobs "
                       "WHERE id = %s", (specials.report,)).fetchone()
    if row is not None and row[0] is not None:
        lines.append(f"scheduled: the month-end report (job {specials.report}), delayed by "
                     f"{profile.delay:g} s at enqueue, started {row[0]:.2f} s after it was enqueued")

    policy = (f"backoff base {BACKOFF_BASE:g} s doubling per attempt, cap {BACKOFF_CAP:g} s, "
              f"jitter {BACKOFF_JITTER:g}")
    flaky = conn.execute("SELECT status, attempts, last_error FROM jobq.jobs WHERE id = %s",
                         (specials.flaky,)).fetchone()
    if flaky is not None:
        status, attempts, error = flaky
        waited = backoffs.get(specials.flaky, {})
        outcome = f"and completed on attempt {attempts}" if status == "completed" else f"and is {status}"
        lines.append(f"retry: the weekly report email (job {specials.flaky}) failed {attempts - 1} times "
                     f"({last_line(error)}), was retried after {seconds_list(waited) or '?'} ({policy}), "
                     f"{outcome}")
    poison = conn.execute("SELECT status, attempts, max_attempts, last_error FROM jobq.jobs WHERE id = %s",
                          (specials.poison,)).fetchone()
    if poison is not None:
        status, attempts, max_attempts, error = poison
        waited = backoffs.get(specials.poison, {})
        lines.append(f"dead letter: invoice 1042 (job {specials.poison}) failed {attempts} of {max_attempts} "
                     f"attempts, retried after {seconds_list(waited) or '?'}, and is {status} with its "
                     f"payload kept; last error: {last_line(error)}; this demo's server is removed when it "
                     "ends, but `pyqueue retry JOB_ID` on your own server runs a dead job again")
    return lines
