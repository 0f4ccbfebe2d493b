"""What a doctor check returns: one :class:`CheckResult` per line of the report.

A line reads ``STATUS check: what [-> fix]`` where STATUS is ``OK`` (nothing to do),
``WARN`` (the job can run, but read the line) or ``FAIL`` (the job will not run, or will
hang, until the fix is applied).  The report exits 0 when no line is ``FAIL``, else 2.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

OK, WARN, FAIL = "OK", "WARN", "FAIL"
EXIT_ALL_OK, EXIT_FAILED = 0, 2


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One line of the report: ``check`` names the check (``versions``, ``network``, ...),
    ``status`` is :data:`OK`, :data:`WARN` or :data:`FAIL`, ``what`` says what was found
    (one line) and ``fix`` what to do about it (empty when there is nothing to do)."""

    check: str
    status: str
    what: str
    fix: str = ""

    def __post_init__(self):
        if self.status not in (OK, WARN, FAIL):
            raise ValueError(f"status must be OK, WARN or FAIL, not {self.status!r}")

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def line(self) -> str:
        """The report line: ``STATUS check: what [-> fix]``, newlines folded to spaces."""
        text = f"{self.status} {self.check}: {one_line(self.what)}"
        return f"{text} -> {one_line(self.fix)}" if self.fix else text


def ok(check: str, what: str) -> CheckResult:
    return CheckResult(check, OK, what)


def warn(check: str, what: str, fix: str = "") -> CheckResult:
    return CheckResult(check, WARN, what, fix)


def fail(check: str, what: str, fix: str = "") -> CheckResult:
    return CheckResult(check, FAIL, what, fix)


def one_line(text: str) -> str:
    """``text`` with its lines joined by ``; `` and runs of spaces kept as they are."""
    return "; ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())


def exit_status(results: Iterable[CheckResult]) -> int:
    """:data:`EXIT_FAILED` when any result failed, else :data:`EXIT_ALL_OK` (warnings allowed)."""
    return EXIT_FAILED if any(r.failed for r in results) else EXIT_ALL_OK


def first_line(e: BaseException, limit: Optional[int] = 300) -> str:
    """The first line of an exception's message (its type name when empty), cut to ``limit``."""
    lines = [s for s in str(e).strip().splitlines() if s.strip()]
    text = lines[0].strip() if lines else type(e).__name__
    return text if limit is None or len(text) <= limit else text[:limit - 3] + "..."
