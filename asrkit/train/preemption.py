"""Preemption: stop on SIGTERM/SIGINT at the next optimizer step, with a checkpoint.

Clusters end jobs with a signal and a grace period before ``SIGKILL``: SLURM sends
``SIGTERM`` to every process of the job step (then ``SIGKILL`` after ``KillWait``, 30 s by
default); ``torchrun`` forwards the ``SIGTERM``/``SIGINT`` it receives to its workers and
kills them after ``--shutdown_timeout`` (30 s).  The training process therefore installs a
handler (:meth:`Preemption.install`) that only records the signal; nothing is done inside
the handler, so a signal can never interrupt a collective or a checkpoint write half-way.

**Agreement.**  The request is acted on at optimizer-step boundaries, identically on every
rank: each rank adds its flag (1 when it has received a signal) to the all-reduce that the
executor already makes once per optimizer step (the global utterance count of the
accumulation group, see ``asrkit.train.executor``), so the decision costs no extra
collective.  Every rank sees the same sum, and a sum > 0 means "stop after this step":
all ranks save and exit at the same step, whichever of them got the signal first -- a
signal that reaches only some nodes (or reaches them a few steps apart) still stops the
whole job in step.  Rank 0 then writes a mid-epoch checkpoint (``step_<N>.pt``, the kind
``save_interval`` writes: it records the sampler position, RNG states and counters, so a
rerun with ``--checkpoint auto`` continues with exactly the next batch), every rank logs
the reason and the run ends with :class:`Preempted` (exit status :data:`EXIT_PREEMPTED`,
after destroying the process group).  Between epochs (after the epoch checkpoint and its CV)
:meth:`Preemption.count_requests` makes the same decision with one tiny all-reduce.

The grace period must cover the rest of the current optimizer step plus one checkpoint
write.  Repeated ``SIGTERM`` changes nothing (SLURM and torchrun may both signal a
worker); a second ``SIGINT`` (Ctrl-C pressed twice) raises ``KeyboardInterrupt`` at once.
DataLoader workers ignore both signals (``asrkit.data.dataset``): the training process
ends them itself, and a worker killed by the signal would fail the batch it was loading.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Optional

import torch

from asrkit.train.problems import TrainingExit

log = logging.getLogger("asrkit.train")

EXIT_PREEMPTED = 4          # exit status of a run stopped by a signal after saving a checkpoint
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(TrainingExit):
    """The run stopped on a stop signal after saving a checkpoint at an optimizer-step
    boundary (logged as a warning, not an error).  Exit status :data:`EXIT_PREEMPTED`."""

    exit_status = EXIT_PREEMPTED


class Preemption:
    """The signal flag of this process and the rank-agreed decision to stop.

    :attr:`requested` is local (this process got a signal); :meth:`count_requests` and the
    executor's per-step all-reduce (which reads :attr:`requested` before each step) turn it
    into a decision identical on every rank.
    """

    def __init__(self):
        self.signum: Optional[int] = None     # the first signal received
        self.received_at: Optional[float] = None
        self._previous: dict[int, object] = {}

    # ------------------------------------------------------------------ handler

    def install(self, signals=SIGNALS) -> "Preemption":
        """Handle ``signals`` in this process (main thread only; a no-op elsewhere)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        """Restore the handlers that were in place before :meth:`install`."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum, self.received_at = signum, time.monotonic()
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: stop now, without the checkpoint

    @property
    def requested(self) -> bool:
        """This process received a stop signal (not yet agreed with the other ranks)."""
        return self.signum is not None

    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "a stop request"

    # ------------------------------------------------------------------ agreement

    def count_requests(self, ctx) -> int:
        """How many ranks have :attr:`requested` -- the same number on every rank (one
        int64 all-reduce of the flags; with one process, the local flag)."""
        if not ctx.distributed:
            return int(self.requested)
        t = torch.tensor([int(self.requested)], dtype=torch.int64, device=ctx.device)
        return int(ctx.all_reduce_sum(t).item())

    def describe(self, ranks_requesting: int, world_size: int) -> str:
        """Why the run stops, for the log (``ranks_requesting`` from the agreed sum)."""
        local = (f"this rank received {self.signal_name()} {time.monotonic() - self.received_at:.1f} s ago"
                 if self.requested else "this rank received no signal")
        return f"stop requested by {ranks_requesting} of {world_size} rank(s) ({local})"
