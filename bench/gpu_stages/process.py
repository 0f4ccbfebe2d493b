"""Running a stage's command under a deadline: its own process group, its output into a
log file, and at the deadline an interrupt (so pytest still writes its report and a stage
its last results), then a kill of the whole group (torchrun's ranks, loader workers)."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

GRACE_S = 10.0  # from the interrupt to the kill


@dataclasses.dataclass
class Finished:
    returncode: int
    seconds: float
    timed_out: bool


def run_with_deadline(cmd: list[str], timeout_s: float, log: Path, env: dict | None = None,
                      cwd: str | Path | None = None) -> Finished:
    """Run ``cmd`` with stdout and stderr into ``log``; after ``timeout_s`` seconds send SIGINT
    to its process group, after :data:`GRACE_S` more SIGKILL."""
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True,
                                preexec_fn=_interruptible)
        timed_out = False
        try:
            proc.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(proc, signal.SIGINT)
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        finally:
            if proc.poll() is None:  # (an exception here: never leave the group running)
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        _signal_group(proc, signal.SIGKILL)  # what the command left behind (loader workers, ranks)
    return Finished(proc.returncode, round(time.perf_counter() - start, 2), timed_out)


def _interruptible() -> None:
    """In the stage's process, before it starts: SIGINT back to its default.  A process
    started with SIGINT ignored (a background job of a non-interactive shell, a pytest-xdist
    worker) passes that on, and Python then installs no KeyboardInterrupt handler: the
    stage would not write its partial results at the deadline, only be killed."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tail(path: Path, max_bytes: int) -> str:
    """The last ``max_bytes`` of a text file (decoded leniently)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        return f.read().decode("utf-8", "replace")
