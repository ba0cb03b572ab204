"""What the examples' READMEs show matches what the workers do (issue 29,
item 12). The Node worker picks a retry up at its next poll, not when the
backoff ends (no NOTIFY marks the end of a backoff): tests/test_examples.py
runs it; here, its README's sample log must not show a retry sooner than
that poll."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_README = ROOT / "examples" / "node" / "README.md"
LINE = re.compile(r"^(\S+Z) node-\d+ (.*)$", re.M)


def test_the_node_readme_shows_the_retry_at_the_next_poll() -> None:
    text = NODE_README.read_text(encoding="utf-8")
    events = [(datetime.fromisoformat(when.replace("Z", "+00:00")), what)
              for when, what in LINE.findall(text)]
    poll = int(re.search(r"polling every (\d+) s", text).group(1))  # type: ignore[union-attr]
    [(failed_at, failed)] = [(at, what) for at, what in events if what.startswith("failed job")]
    job = re.match(r"failed job (\d+)", failed).group(1)  # type: ignore[union-attr]
    [retried_at] = [at for at, what in events if what == f"completed job {job}"]
    assert (retried_at - failed_at).total_seconds() >= poll, "the retry shown sooner than the next poll"
    prose = " ".join(text.split())
    assert "picks the retry up at its next poll, up to `JOBQ_POLL_SECONDS` (5 s) after the failure" in prose
