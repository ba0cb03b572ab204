"""Argument types the subcommands share: seconds, counts and times, each
refused with a message that says what was expected."""

from __future__ import annotations

import argparse
import math
from datetime import datetime


def seconds(text: str, *, minimum: float = 0.0, inclusive: bool = True) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from exc
    if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds {bound}, got {text!r}")
    return value


def delay_seconds(text: str) -> float:
    return seconds(text)


def positive_seconds(text: str) -> float:
    return seconds(text, inclusive=False)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    return moment if moment.tzinfo else moment.astimezone()
