"""``Problem``: one reason a training job cannot start, found before any heavy work.

Each problem has a ``kind`` (what sort of thing is wrong, so that a caller such as
``asrkit doctor`` can sort them without reading the text), ``what`` (the finding, naming the
option, key or file) and ``fix`` (what to do; may be empty).  ``str(problem)`` is the line
``asrkit.bin.train`` prints: ``what``, then `` -- fix`` when there is one."""
from __future__ import annotations

import dataclasses
import enum


class ProblemKind(enum.Enum):
    MISSING_FILE = "missing file"      # a path given (option or config key) names no file
    UNUSABLE_PATH = "unusable path"    # a path that exists but cannot serve: an empty data list, a file as a directory
    UNSET_PATH = "unset path"          # a config key that must name a file is not set
    SETTING = "setting"                # a config value that cannot run here (device, backend, dtype)
    OPTIONS = "options"                # command-line options that contradict each other


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    what: str
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.what} -- {self.fix}" if self.fix else self.what


def missing_file(label: str, path) -> Problem:
    """``<label> <path>: file not found``."""
    return Problem(ProblemKind.MISSING_FILE, f"{label} {path}: file not found")
