"""Progress of long work on stderr: a tqdm bar on a terminal, log lines elsewhere.

tqdm is what the ecosystem uses for this (pip, torch.hub, huggingface, lhotse): it sizes
itself to the terminal, smooths its rate and time-left estimates and redraws in place.
A bar is only useful to someone watching a terminal, so when stderr is not one (a log
file, CI, a recipe's ``2>&1 | tee``) the same progress is a log line every ``every_s``
seconds instead -- a redrawn bar would fill a file with carriage returns.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Callable, Optional


class ProgressReport:
    """Progress of ``total`` units of work (``None``: unknown), advanced with :meth:`advance`.

    * on a terminal (``terminal=None``: whether stderr is one): a tqdm bar named ``desc``,
      shown once the work has lasted ``delay_s`` (short work shows nothing) and removed
      when done;
    * otherwise: ``log.info(line())`` at most every ``every_s`` seconds (``line`` returns
      the text; by default ``desc done/total unit``).

    ``bar_format``: tqdm's (None: its default).  ``done``: the units already done when the
    report starts (e.g. a resumed epoch's batches), not counted in the rate.
    """

    def __init__(self, total: Optional[float], desc: str, unit: str, log: logging.Logger,
                 every_s: float = 10.0, line: Optional[Callable[[], str]] = None,
                 terminal: Optional[bool] = None, delay_s: float = 0.5, bar_format: Optional[str] = None,
                 done: float = 0.0):
        self.total, self.desc, self.unit, self.log = total, desc, unit, log
        self.every_s = every_s
        self.done = done
        self._line = line or self._default_line
        self._last = time.perf_counter()
        terminal = sys.stderr.isatty() if terminal is None else terminal
        self._bar = None
        if terminal:
            from tqdm import tqdm  # (deferred: only a terminal draws a bar)
            self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, delay=delay_s, dynamic_ncols=True,
                             file=sys.stderr, bar_format=bar_format, initial=done)

    def _default_line(self) -> str:
        total = f"/{self.total:g}" if self.total is not None else ""
        return f"{self.desc}: {self.done:g}{total} {self.unit}"

    def advance(self, amount: float) -> None:
        """``amount`` more units done."""
        self.done += amount
        if self._bar is not None:
            self._bar.update(amount)
            return
        now = time.perf_counter()
        if now - self._last >= self.every_s:
            self._last = now
            self.log.info("%s", self._line())

    def advance_to(self, done: float) -> None:
        """Done up to ``done`` units in all."""
        self.advance(max(0.0, done - self.done))

    def close(self) -> None:
        """Remove the bar (log lines need no closing)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "ProgressReport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AudioProgress:
    """A progress callback ``(done_s, total_s)`` over one file's seconds of audio (what
    ``Transcriber.transcribe(..., progress=)`` calls): a :class:`ProgressReport` named
    ``desc``, made at the first call, when the length is known; off a terminal a line every
    ``every_s`` seconds of work, ``desc: 120/600 s of audio (20 %)``."""

    BAR = "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s audio [{elapsed}<{remaining}]"

    def __init__(self, desc: str, log: logging.Logger, every_s: float = 30.0):
        self.desc, self.log, self.every_s = desc, log, every_s
        self.report: Optional[ProgressReport] = None

    def __call__(self, done: float, total: float) -> None:
        if self.report is None:
            self.report = ProgressReport(total, self.desc, "s", self.log, every_s=self.every_s, line=self.line,
                                         bar_format=self.BAR)
        self.report.advance_to(done)

    def line(self) -> str:
        """The log line when stderr is not a terminal."""
        r = self.report
        return f"{self.desc}: {r.done:.0f}/{r.total:.0f} s of audio ({100.0 * r.done / max(r.total, 1e-9):.0f} %)"

    def close(self) -> None:
        if self.report is not None:
            self.report.close()


def clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour on) of ``seconds`` (negative: 0)."""
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
