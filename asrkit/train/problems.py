"""What stops a training run: :class:`Problem`, one reason a job cannot start found before
any heavy work, and :class:`TrainingExit`, the exception that ends a run with an exit status.

Each problem has a ``kind`` (what sort of thing is wrong, so that a caller such as
``asrkit doctor`` can sort them without reading the text), ``what`` (the finding, naming the
option, key or file) and ``fix`` (what to do; may be empty).  ``str(problem)`` is the line
``asrkit.bin.train`` prints: ``what``, then `` -- fix`` when there is one.

Every way a run ends other than finishing is a :class:`TrainingExit` carrying its
``exit_status`` (``asrkit.bin.train`` documents the statuses); ``asrkit.train.entry``
reports its message and ``run`` returns that status: nothing else decides a status.  The
parts of the training raise their own errors (``CheckpointError``, ``ListError``, ...); the
run turns them into these where it knows what they mean (``cannot resume: ...``)."""
from __future__ import annotations

import contextlib
import dataclasses
import enum
from typing import Iterator


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


class TrainingExit(Exception):
    """The run ends with status :attr:`exit_status`; ``str()`` is the message it reports.

    ``once_per_node``: every rank raises the same message (the ranks' agreement checks), so
    besides rank 0 (whose log goes to stderr) only the first rank of each other node prints
    it; otherwise every rank other than 0 prints its own on stderr."""

    exit_status = 1

    def __init__(self, message: str, *, once_per_node: bool = False):
        super().__init__(message)
        self.once_per_node = once_per_node


class Refused(TrainingExit):
    """The run cannot start or go on with what it was handed: the config, a file, an option,
    a checkpoint it cannot resume, ranks that disagree, or training data of which no sample
    could be used.  Exit status 2."""

    exit_status = 2


class Failed(TrainingExit):
    """The training failed: a checkpoint could not be written, too many non-finite steps, a
    collective that timed out.  Exit status 1."""

    exit_status = 1


@contextlib.contextmanager
def exits_as(exit_type: type[TrainingExit], *errors: type[Exception], prefix: str = "",
             once_per_node: bool = False) -> Iterator[None]:
    """Around code whose errors of the types ``errors`` end the run: each is raised again as
    ``exit_type(prefix + its message)`` (chained to it), with ``once_per_node``."""
    try:
        yield
    except errors as e:
        raise exit_type(f"{prefix}{e}", once_per_node=once_per_node) from e
