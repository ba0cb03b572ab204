"""Plain-text tables and durations for the CLI and the demo."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

STATS_COLUMNS = ("queue", "ready", "scheduled", "running", "dead", "waiting", "oldest ready")


def format_age(age: timedelta | None) -> str:
    """A short human duration: 0s, 4.2s, 3m05s, 2h07m, 3d04h; "-" for none
    (the oldest_ready_age of a queue where nothing is ready)."""
    if age is None:
        return "-"
    seconds = age.total_seconds()
    if seconds < 60:
        return "0s" if seconds <= 0 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned under a header and a rule: the first to the left,
    the others (numbers) to the right."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        parts = [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)])


def stats_table(stats: Sequence[Any]) -> str:
    """jobq.stats rows (pyqueue.QueueStats) as an aligned table (waiting: jobs
    waiting for their parents or batch members)."""
    rows = [
        (s.queue, str(s.ready), str(s.scheduled), str(s.running), str(s.dead), str(s.waiting),
         format_age(s.oldest_ready_age))
        for s in stats
    ]
    table = format_table(STATS_COLUMNS, rows)
    return table if rows else f"{table}\n(no queues yet)"
