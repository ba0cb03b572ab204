"""What the metrics tests share: scraping a real ``/metrics`` over HTTP,
reading it with prometheus-client's own parser, and what jobq.stats says
the jobq_* series must be."""

from __future__ import annotations

import urllib.request
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

Conn = psycopg.Connection[tuple[Any, ...]]
Key = tuple[str, tuple[tuple[str, str], ...]]  # a sample: its name and sorted labels
Samples = dict[Key, float]
STATES = ("ready", "scheduled", "running", "dead", "waiting")
COUNTERS = ("completed", "failed", "dead")
OUTCOMES = ("completed", "failed", "timeout", "shutdown", "lease_lost", "acknowledged")
HTTP_TIMEOUT = 30  # seconds a scrape may take on this shared machine


def key(name: str, **labels: str) -> Key:
    return name, tuple(sorted(labels.items()))


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """The samples of a Prometheus text, and each family's type by name."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[key(sample.name, **sample.labels)] = sample.value
    return samples, types


def fetch(url: str) -> tuple[str, str]:
    """The body and content type of a GET."""
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
        return response.read().decode(), response.headers["Content-Type"]


def scrape(port: int) -> Samples:
    return parse(fetch(f"http://127.0.0.1:{port}/metrics")[0])[0]


def jobq_series(samples: Samples) -> Samples:
    """The series read from the database (jobq_up and the age left out)."""
    return {k: v for k, v in samples.items()
            if k[0].startswith("jobq_") and k[0] not in {"jobq_up", "jobq_oldest_ready_age_seconds"}}


def from_stats(conn: Conn) -> tuple[Samples, dict[str, float]]:
    """What jobq.stats holds, as the jobq_* series must show it; and the
    oldest ready age (seconds, 0 when none) per queue."""
    expected: Samples = {}
    ages: dict[str, float] = {}
    rows = conn.execute("SELECT queue, ready, scheduled, running, dead, waiting, completed_total, "
                        "failed_total, dead_total, coalesce(extract(epoch FROM oldest_ready_age), 0)::float8 "
                        "FROM jobq.stats").fetchall()
    for queue, *values, age in rows:
        for state, count in zip(STATES, values[:5], strict=True):
            expected[key("jobq_jobs", queue=queue, state=state)] = float(count)
        for counter, total in zip(COUNTERS, values[5:], strict=True):
            expected[key(f"jobq_{counter}_total", queue=queue)] = float(total)
        ages[queue] = float(age)
    return expected, ages


def outcomes(samples: Samples, queue: str) -> dict[str, float]:
    """pyqueue_job_duration_seconds_count per outcome (only those seen)."""
    found = {outcome: samples.get(key("pyqueue_job_duration_seconds_count", outcome=outcome, queue=queue))
             for outcome in OUTCOMES}
    return {outcome: count for outcome, count in found.items() if count is not None}


def bucket(samples: Samples, name: str, le: str, **labels: str) -> float:
    return samples[key(f"{name}_bucket", le=le, **labels)]
