"""The rows of ``jobq.metrics()`` as Prometheus metric families, and the
Prometheus text of a set of families.

``jobq.metrics()`` returns ``(name, labels jsonb, value)`` rows. A name
ending in ``_total`` is a counter (prometheus-client's CounterMetricFamily
takes the name without the suffix and writes the samples with it, so the
exposition names are exactly ``jobq_completed_total`` and so on); every
other name is a gauge. Names a newer jobq adds are exposed the same way,
with a generic help text.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

logger = logging.getLogger("pyqueue.metrics")

QUERY = "SELECT name, labels, value FROM jobq.metrics()"
Row = Sequence[Any]  # (name text, labels jsonb as a dict, value float or None)

HELP = {
    "jobq_jobs": "Live jobs per queue and state (ready: due now; scheduled: due later; running: leased; "
                 "waiting: held until their parent jobs finish; "
                 "dead: dead-lettered, kept in the archive)",
    "jobq_oldest_ready_age_seconds": "Seconds since the oldest ready job of the queue became due "
                                     "(how far behind its workers are)",
    "jobq_completed_total": "Jobs completed, per queue (jobq's own counters: pruning never resets them)",
    "jobq_failed_total": "Failed attempts, per queue (every failure counts, the retried and the last)",
    "jobq_dead_total": "Jobs dead-lettered after their last attempt, per queue",
}
UP = "jobq_up"
UP_HELP = ("1 when this scrape read jobq.metrics() from the database, 0 when it could not "
           "(the jobq_* metrics are then missing and the error is logged)")


def families(rows: Iterable[Row]) -> list[Metric]:
    """The metric families of ``jobq.metrics()`` rows, one per name, in the
    order the names first appear. A family's label names are those of all
    its rows (a row without one gets ""); a value of NULL is NaN."""
    grouped: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for name, labels, value in rows:
        grouped.setdefault(str(name), []).append((dict(labels or {}), math.nan if value is None else value))
    found: list[Metric] = []
    for name, samples in grouped.items():
        keys = sorted({key for labels, _ in samples for key in labels})
        text = HELP.get(name, f"{name}, from jobq.metrics()")
        try:
            family: GaugeMetricFamily | CounterMetricFamily
            if name.endswith("_total"):
                family = CounterMetricFamily(name, text, labels=keys)
            else:
                family = GaugeMetricFamily(name, text, labels=keys)
            for labels, value in samples:
                family.add_metric([str(labels.get(key, "")) for key in keys], float(value))
        except ValueError as error:  # a name or label Prometheus does not accept
            logger.warning("jobq.metrics() row %r left out: %s", name, error)
            continue
        found.append(family)
    return found


def up(ok: bool) -> Metric:
    """``jobq_up``: whether this scrape could read the database."""
    return GaugeMetricFamily(UP, UP_HELP, value=1.0 if ok else 0.0)


class _Fixed:
    """A collector of families already read."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self.metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def exposition(metrics: Iterable[Metric]) -> bytes:
    """The Prometheus text of ``metrics`` (serve it as
    ``prometheus_client.CONTENT_TYPE_LATEST``)."""
    return generate_latest(_Fixed(metrics))
