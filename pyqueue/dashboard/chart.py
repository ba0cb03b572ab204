"""The overview's throughput chart: completed and failed per minute over the
last hour as SVG geometry (stacked bars, completed below failed), drawn by
the template as plain SVG elements — no script, no external library.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

WIDTH = 720  # SVG user units
HEIGHT = 180
LEFT = 40  # room for the scale
BOTTOM = 20  # room for the time labels
TOP = 8


@dataclass(frozen=True)
class Bar:
    """One minute: its label, counts and the rectangles' geometry."""

    minute: str
    completed: int
    failed: int
    x: float
    width: float
    completed_y: float
    completed_height: float
    failed_y: float
    failed_height: float


@dataclass(frozen=True)
class Chart:
    """Everything the template draws."""

    width: int
    height: int
    bars: list[Bar]
    scale_max: int
    baseline: float
    left: int
    top: int
    labels: list[tuple[float, str, str]]  # x, text, text-anchor (the last one ends at the edge)
    total_completed: int
    total_failed: int


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 times 10^k at least value (at least 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def minute_label(minute: datetime) -> str:
    return minute.astimezone(timezone.utc).strftime("%H:%M")


def build(series: list[tuple[datetime, int, int]]) -> Chart:
    """The chart of (minute, completed, failed), oldest first."""
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - TOP - BOTTOM
    scale_max = nice_ceiling(max((completed + failed for _, completed, failed in series), default=0))
    slot = plot_width / max(len(series), 1)
    baseline = TOP + plot_height
    bars = []
    for index, (minute, completed, failed) in enumerate(series):
        completed_height = plot_height * completed / scale_max
        failed_height = plot_height * failed / scale_max
        bars.append(Bar(
            minute=minute_label(minute), completed=completed, failed=failed,
            x=round(LEFT + index * slot + 0.5, 2), width=round(max(slot - 1, 1), 2),
            completed_y=round(baseline - completed_height, 2), completed_height=round(completed_height, 2),
            failed_y=round(baseline - completed_height - failed_height, 2),
            failed_height=round(failed_height, 2),
        ))
    labels = [(bar.x, bar.minute, "start") for index, bar in enumerate(bars)
              if index % 15 == 0 and index < len(bars) - 5]
    if bars:
        labels.append((round(bars[-1].x + bars[-1].width, 2), bars[-1].minute, "end"))
    return Chart(width=WIDTH, height=HEIGHT, bars=bars, scale_max=scale_max, baseline=baseline, left=LEFT,
                 top=TOP, labels=labels, total_completed=sum(bar.completed for bar in bars),
                 total_failed=sum(bar.failed for bar in bars))
