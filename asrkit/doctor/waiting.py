"""Progress of the doctor's waits for the other nodes (the master port, the check-in): a line
on stderr every ``PROGRESS_EVERY_S`` seconds of a wait, so that a node left waiting up to
``--timeout_s`` shows what it waits for and how long it has waited::

    doctor: waiting for node 0 at 10.0.0.1:29500: 10 s of at most 300 s (last attempt: Connection refused)
"""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

PROGRESS_EVERY_S = 10.0


class WaitProgress:
    """The progress lines of one wait for ``what`` lasting at most ``timeout_s``, started at
    construction; :meth:`tick` prints one when the next multiple of ``every_s`` seconds has
    passed (one line per tick at most: a tick that comes late prints once)."""

    def __init__(self, what: str, timeout_s: float, every_s: float = PROGRESS_EVERY_S,
                 stream: Optional[TextIO] = None):
        self.what = what
        self.timeout_s = timeout_s
        self.every_s = every_s
        self.stream = stream
        self.start = time.monotonic()
        self.next_s = every_s

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.timeout_s - self.elapsed()

    def tick(self, detail: str = "") -> None:
        """Print the progress line when it is due; ``detail`` is added in parentheses."""
        elapsed = self.elapsed()
        if elapsed < self.next_s:
            return
        while self.next_s <= elapsed:
            self.next_s += self.every_s
        print(f"doctor: waiting for {self.what}: {elapsed:.0f} s of at most {self.timeout_s:g} s"
              + (f" ({detail})" if detail else ""), file=self.stream or sys.stderr, flush=True)
