"""``asrkit.bin.train`` with test hooks installed: fault injection and collective counting.

Production code reads no test-only setting; a test that needs a fault launches its ranks
as ``python -m tests.hooked_train [hook options] -- <asrkit.bin.train arguments>`` (under
torchrun too), and this module patches the library before calling
``asrkit.bin.train.main``:

``--kill_rank R --kill_step S``
    rank R SIGKILLs itself right after optimizer step S (after ``Trainer._after_step`` would
    start, before anything of step S is saved), in the first attempt of a torchrun job only
    (``TORCHELASTIC_RESTART_COUNT`` unset or 0).
``--pause_rank R --pause_step S --pause_file PATH [--pause_attempt A]``
    rank R writes ``PATH.reached`` right after optimizer step S and waits until ``PATH``
    exists (``install_pause``), in attempt A of a torchrun job only (``TORCHELASTIC_RESTART_COUNT``
    A; default 0, the first).
``--raise_step S``
    every rank raises ``RuntimeError`` right after optimizer step S (``install_raise``): an
    internal error, none of asrkit's ``TrainingExit``s.
``--stall_rank R [--stall_batch K]``
    rank R's train loader hangs forever before the K-th (0-based, default 0) batch of
    every pass, while the rank's monitor says it waits for the data loader.
``--count_collectives PATH``
    counts the Python-level collectives (``torch.distributed.all_reduce``, ``broadcast``,
    ``all_gather_object``, ``gather_object``, ``barrier``) issued while an epoch's
    ``Executor.steps`` runs (its caller's work between steps included) and the optimizer
    steps taken there, and writes
    ``{"collectives": n, "steps": s}`` as JSON to ``PATH.rank<r>`` at the end.  DDP's own
    gradient all-reduce and buffer broadcast run in C++ and are not counted.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

log = logging.getLogger("asrkit.train")


def _flush_logs() -> None:
    for h in logging.getLogger().handlers:
        h.flush()


def install_kill(rank: int, step: int) -> None:
    from asrkit.train.trainer import Trainer
    original = Trainer._after_step

    def after_step(self, result):
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") in ("", "0")
        if self.ctx.rank == rank and self.state.step == step and first_attempt:
            log.warning("fault injection (kill rank %d after step %d): rank %d kills itself with SIGKILL now",
                        rank, step, rank)
            _flush_logs()
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, result)

    Trainer._after_step = after_step


def install_pause(rank: int, step: int, path: str, attempt: int = 0) -> None:
    """Rank ``rank`` writes ``path + ".reached"`` right after optimizer step ``step`` (before
    anything of the step is saved) and then waits until ``path`` exists, in torchrun attempt
    ``attempt`` only (0: the first, or a run outside torchrun): a test changes the world (takes
    a link down, sends a signal) at a known step."""
    from asrkit.train.trainer import Trainer
    original = Trainer._after_step

    def after_step(self, result):
        this_attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0) == attempt
        if self.ctx.rank == rank and self.state.step == step and this_attempt:
            log.warning("fault injection (pause rank %d after step %d): waiting for %s", rank, step, path)
            _flush_logs()
            with open(path + ".reached", "w") as f:
                f.write(str(os.getpid()))
            while not os.path.exists(path):
                time.sleep(0.05)
        return original(self, result)

    Trainer._after_step = after_step


def install_raise(step: int) -> None:
    from asrkit.train.trainer import Trainer
    original = Trainer._after_step

    def after_step(self, result):
        if self.state.step == step:
            raise RuntimeError(f"fault injection: an internal error after step {step}")
        return original(self, result)

    Trainer._after_step = after_step


class _StallingLoader:
    """A train loader that hangs before batch ``at`` of every pass (everything else delegated)."""

    def __init__(self, loader, rank: int, at: int):
        self.__dict__.update(_loader=loader, _rank=rank, _at=at)

    def __getattr__(self, name):
        return getattr(self.__dict__["_loader"], name)

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        for count, batch in enumerate(self._loader):
            if count == self._at:
                self._hang()
            yield batch
        if self._at >= len(self._loader):
            self._hang()

    def _hang(self):
        log.warning("fault injection (stall rank %d at batch %d): the train loader of rank %d hangs now "
                    "(unix time %.3f)", self._rank, self._at, self._rank, time.time())
        _flush_logs()
        while True:
            time.sleep(3600)


def install_stall(rank: int, batch: int) -> None:
    from asrkit.train.dist import monitor
    original = monitor.MonitoredLoader.__init__

    def init(self, loader, monitor, kind="train"):
        if kind == "train" and monitor.rank == rank:
            loader = _StallingLoader(loader, rank, batch)
        original(self, loader, monitor, kind)

    monitor.MonitoredLoader.__init__ = init


def install_collective_counter(path: str) -> None:
    import torch.distributed as dist
    from asrkit.train.executor import Executor
    counts = {"collectives": 0, "steps": 0}
    inside = [False]
    for name in ("all_reduce", "broadcast", "all_gather_object", "gather_object", "barrier"):
        original = getattr(dist, name)

        def counted(*args, _original=original, **kwargs):
            if inside[0]:
                counts["collectives"] += 1
            return _original(*args, **kwargs)

        setattr(dist, name, counted)
    steps = Executor.steps

    def counting_steps(self, loader, state, *args, **kwargs):
        inside[0] = True
        start = state.step
        try:
            yield from steps(self, loader, state, *args, **kwargs)
        finally:
            inside[0] = False
            counts["steps"] += state.step - start
            with open(f"{path}.rank{self.ctx.rank}", "w") as f:
                json.dump(counts, f)

    Executor.steps = counting_steps


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("error: usage: python -m tests.hooked_train [hooks] -- <asrkit.bin.train arguments>", file=sys.stderr)
        return 2
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="tests.hooked_train")
    p.add_argument("--kill_rank", type=int)
    p.add_argument("--kill_step", type=int)
    p.add_argument("--pause_rank", type=int)
    p.add_argument("--pause_step", type=int)
    p.add_argument("--pause_file")
    p.add_argument("--pause_attempt", type=int, default=0)
    p.add_argument("--raise_step", type=int)
    p.add_argument("--stall_rank", type=int)
    p.add_argument("--stall_batch", type=int, default=0)
    p.add_argument("--count_collectives")
    hooks = p.parse_args(argv[:split])
    if hooks.kill_rank is not None:
        install_kill(hooks.kill_rank, hooks.kill_step)
    if hooks.pause_rank is not None:
        install_pause(hooks.pause_rank, hooks.pause_step, hooks.pause_file, hooks.pause_attempt)
    if hooks.raise_step is not None:
        install_raise(hooks.raise_step)
    if hooks.stall_rank is not None:
        install_stall(hooks.stall_rank, hooks.stall_batch)
    if hooks.count_collectives:
        install_collective_counter(hooks.count_collectives)
    from asrkit.bin.train import main as train_main
    return train_main(argv[split + 1:])


if __name__ == "__main__":
    from asrkit.train.entry import end_with
    end_with(main)  # (as asrkit.bin.train ends)
