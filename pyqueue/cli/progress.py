"""A live one-line progress display: rewritten in place with ``\\r`` on a
terminal, a plain line every few seconds anywhere else (logs, pipes, CI)."""

from __future__ import annotations

import shutil
import time
from typing import TextIO

PLAIN_INTERVAL = 2.0  # seconds between lines when the stream is not a terminal


class ProgressLine:
    """Shows the latest status line on ``stream``."""

    def __init__(self, stream: TextIO, *, live: bool | None = None, interval: float = PLAIN_INTERVAL) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.interval = interval
        self._status = ""  # the latest status line
        self._width = 0  # live: length of the text on screen, to blank it out
        self._printed: str | None = None  # plain: the last line written
        self._printed_at = float("-inf")  # plain: time.monotonic() of that line

    def update(self, text: str) -> None:
        """Show text now (terminal: cut to its width, so that ``\\r`` can
        redraw it) or when the interval has passed (plain)."""
        if self.live:
            text = text[: shutil.get_terminal_size().columns - 1]
        self._status = text
        if self.live:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self.stream.flush()
        elif time.monotonic() - self._printed_at >= self.interval and text != self._printed:
            self._write_line(text)

    def note(self, text: str) -> None:
        """A line of its own, above the status line (which a terminal redraws)."""
        if self.live:
            self.stream.write("\r" + text.ljust(self._width) + "\n")
            self.stream.write(self._status)
            self.stream.flush()
            self._width = len(self._status)
        else:
            self._write_line(text)
            self._printed = None  # the next status line is worth printing again

    def finish(self, text: str) -> None:
        """Show the final state and end the line."""
        if self.live:
            self.stream.write("\r" + text.ljust(self._width) + "\n")
            self.stream.flush()
            self._width = 0
        elif text != self._printed:
            self._write_line(text)

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
        self._printed = text
        self._printed_at = time.monotonic()
