"""Prometheus metrics: jobq's, read from the database, and a worker's own.

Needs prometheus-client (``pip install 'jobq[metrics]'``). Never
imported by ``import pyqueue`` nor by a worker without ``metrics_port``;
the worker imports it only when asked for metrics.

- ``families``: the rows of ``jobq.metrics()`` as Prometheus metric
  families (gauges, and counters for the ``_total`` names) plus ``jobq_up``;
- ``database``: :class:`DatabaseCollector`, a collector that runs
  ``jobq.metrics()`` on each scrape, with a timeout;
- ``clock``: the database's clock as a worker sees it through its claims
  (for the pickup delay);
- ``worker``: :class:`WorkerMetrics`, the observer a worker started with
  ``metrics_port`` uses: the handler histograms and the in-flight gauge,
  served with the database's metrics over HTTP.
"""

from __future__ import annotations

from pyqueue.metrics.database import DatabaseCollector
from pyqueue.metrics.families import exposition, families
from pyqueue.metrics.worker import WorkerMetrics

__all__ = ["DatabaseCollector", "WorkerMetrics", "exposition", "families"]
