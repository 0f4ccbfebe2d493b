"""What the GPU check's stages share: the result file each stage keeps up to date, the
precisions it compares, the measured loader, host-sync counting and the training loop
that runs the library's executor for a number of optimizer steps."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from asrkit.config import TrainConfig, apply_overrides, read_yaml

from asrkit.schema import build
from asrkit.files import atomic_write_text
from asrkit.train.build import TrainingParts
from asrkit.train.dist import DistContext
from asrkit.train.executor import Executor, TrainState

SYNC_WARNING = "synchronizing"  # torch.cuda.set_sync_debug_mode("warn")'s message says "...called a synchronizing CUDA operation"


class StageRecord:
    """``<out>/<stage>.json``: ``{"stage", "status", "results", "summary", "seconds"}``,
    rewritten (atomically) after every :meth:`record` and :meth:`summary`, so a stage cut
    off by its time limit leaves what it measured so far (status ``"running"``)."""

    def __init__(self, out: Path, stage: str):
        self.path = Path(out) / f"{stage}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.start = time.perf_counter()
        self.data: dict[str, Any] = {"stage": stage, "status": "running", "results": {}, "summary": []}
        self._write()

    def record(self, key: str, value: Any) -> None:
        self.data["results"][key] = value
        self._write()

    def summary(self, line: str) -> None:
        """One line of the check's closing summary (printed at the end, in stage order)."""
        self.data["summary"].append(line)
        print(line, flush=True)
        self._write()

    def finish(self, status: str = "done") -> None:
        self.data["status"] = status
        self._write()

    def _write(self) -> None:
        self.data["seconds"] = round(time.perf_counter() - self.start, 2)
        atomic_write_text(self.path, json.dumps(self.data, indent=1, default=str))


def stage_args(description: str) -> argparse.ArgumentParser:
    """The options every stage takes (``bench/gpu_check.py`` passes them)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, required=True, help="folder for <stage>.json and the stage's files")
    p.add_argument("--seconds", type=float, required=True, help="the stage's time budget")
    p.add_argument("--cpu_dry_run", action="store_true", help="tiny sizes on CPU (CUDA-only parts skipped)")
    return p


def device_for(dry_run: bool) -> torch.device:
    return torch.device("cpu") if dry_run else torch.device("cuda", 0)


@dataclasses.dataclass(frozen=True)
class Precision:
    """A precision compared: the config's ``dtype`` and whether fp32 matmuls and
    convolutions may use TF32 (CUDA only; on CPU the flag changes nothing)."""

    name: str
    dtype: str
    tf32: bool = False

    def apply(self) -> None:
        """Set torch's global TF32 switches for this precision (off for all but ``tf32``:
        cuDNN's own default is on, which would make "fp32" convolutions TF32)."""
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32


PRECISIONS = {p.name: p for p in (Precision("fp32", "fp32"), Precision("tf32", "fp32", tf32=True),
                                   Precision("bf16", "bf16"), Precision("fp16", "fp16"))}


def free_memory(device: torch.device) -> None:
    """Collect what a finished measurement left (model, optimizer, loader) and, on CUDA, hand
    the cached blocks back, so the next measurement's peak memory is its own."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def load_cfg(path: str | Path, overrides: list[str]) -> TrainConfig:
    return build(TrainConfig, apply_overrides(read_yaml(str(path)), overrides))


def make_executor(parts: TrainingParts, ctx: DistContext, model_dir: Path, precision: Precision,
                  model: Optional[torch.nn.Module] = None) -> Executor:
    """The library's executor for ``parts`` (``model`` replaces ``parts.model``, e.g. compiled).
    On CPU (the dry run) fp16 gets a CPU GradScaler, so the executor's scaler path runs there
    too; on CUDA the scaler is the one ``build_training`` made."""
    scaler = parts.scaler
    if precision.dtype == "fp16" and ctx.device.type == "cpu":
        scaler = torch.amp.GradScaler("cpu")
    model_dir.mkdir(parents=True, exist_ok=True)
    return Executor(parts.train_cfg, model if model is not None else parts.model, parts.optimizer, parts.scheduler,
                    ctx, model_dir, scaler=scaler, progress=False)


class MeasuredLoader:
    """A train loader that counts what it hands out -- batches, utterances, real and padded
    frames -- and the seconds spent waiting for each batch; everything else is the wrapped
    loader's (the executor reads ``sampler`` through it)."""

    def __init__(self, loader):
        self.__dict__.update(_loader=loader, batches=0, utts=0, frames=0, padded=0, wait=0.0, shapes=[], sizes=[])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_loader"], name)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[dict]:
        it = iter(self._loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.wait += time.perf_counter() - start
            self.batches += 1
            self.utts += int(batch["feats_lengths"].numel())
            self.frames += int(batch["feats_lengths"].sum())
            self.padded += int(batch["feats"].shape[0] * batch["feats"].shape[1])
            # (batch size, padded frames, padded target length): what the kernels see, in order
            self.shapes.append((*map(int, batch["feats"].shape[:2]), int(batch["target"].shape[1])))
            self.sizes.append((int(batch["feats_lengths"].sum()), int(batch["feats"].shape[0] * batch["feats"].shape[1])))
            yield batch

    def counters(self) -> dict:
        return {"batches": self.batches, "utts": self.utts, "frames": self.frames, "padded": self.padded,
                "wait": self.wait}


@dataclasses.dataclass
class StepMarks:
    """Wall clock and loader counters at chosen optimizer steps (``at[step]``)."""

    at: dict = dataclasses.field(default_factory=dict)

    def span(self, first: int, last: int) -> dict:
        """Rates between steps ``first`` and ``last`` (the loader reads one batch ahead: the
        counts lead by one batch at both ends, which cancels)."""
        a, b = self.at[first], self.at[last]
        seconds = b["time"] - a["time"]
        frames, utts = b["frames"] - a["frames"], b["utts"] - a["utts"]
        padded = b["padded"] - a["padded"]
        return {"steps": last - first, "seconds": round(seconds, 3), "real_frames": frames, "utts": utts,
                "real_frames_per_s": round(frames / seconds, 1), "utts_per_s": round(utts / seconds, 2),
                "padding_share": round(1 - frames / max(padded, 1), 4),
                "data_wait_share": round((b["wait"] - a["wait"]) / seconds, 4),
                "seconds_per_step": round(seconds / max(last - first, 1), 4)}


class SyncCount:
    """Host syncs of CUDA work, from ``torch.cuda.set_sync_debug_mode("warn")``: between
    :meth:`start` and :meth:`stop` (given the optimizer step at each), every synchronizing
    CUDA call warns; ``sites`` counts them by the torch line that synced and the innermost
    asrkit line that called it (the stack at the warning).  Other warnings go to ``caught``.
    Used inside :func:`recording_warnings`."""

    def __init__(self, caught: list, device: torch.device):
        self.caught, self.device = caught, device
        self.sites: dict[str, int] = {}
        self.first = self.last = None
        self._previous = None

    def _hook(self, message, category, filename, lineno, file=None, line=None) -> None:
        if SYNC_WARNING not in str(message):
            self.caught.append(warnings.WarningMessage(message, category, filename, lineno, file, line))
            return
        ours = [f for f in traceback.extract_stack()[:-1] if "/asrkit/" in f.filename.replace("\\", "/")]
        caller = (f"{Path(ours[-1].filename).parent.name}/{Path(ours[-1].filename).name}:{ours[-1].lineno} "
                  f"{ours[-1].name}" if ours else "(no asrkit frame)")
        site = f"{Path(filename).name}:{lineno} <- {caller}"
        self.sites[site] = self.sites.get(site, 0) + 1

    def start(self, step: int) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self._previous = warnings.showwarning
            warnings.showwarning = self._hook
            torch.cuda.set_sync_debug_mode("warn")
        self.first = step

    def stop(self, step: int) -> None:
        if self.first is None or self.last is not None:
            return
        if self.device.type == "cuda":
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = self._previous
        self.last = step

    def report(self) -> dict:
        if self.device.type != "cuda":
            return {"syncs_per_step": None, "why": "no CUDA: host syncs are counted on a GPU only"}
        if self.first is None or self.last is None or self.last <= self.first:
            return {"syncs_per_step": None, "why": "the counted steps were not reached"}
        steps = self.last - self.first
        total = sum(self.sites.values())
        return {"syncs_per_step": round(total / steps, 2), "syncs": total, "steps": steps,
                "sites": {k: round(v / steps, 2) for k, v in sorted(self.sites.items(), key=lambda kv: -kv[1])},
                "sites_are": "syncs per optimizer step at each torch line <- asrkit caller"}


@contextlib.contextmanager
def recording_warnings() -> Iterator[list]:
    """Every warning raised inside, kept (and not printed)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def other_warnings(caught: list, limit: int = 8) -> list[str]:
    """The distinct warnings other than host syncs (first line, at most ``limit``)."""
    seen: list[str] = []
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message).splitlines()[0][:200]}"
        if SYNC_WARNING not in text and text not in seen:
            seen.append(text)
    return seen[:limit]


def train_steps(executor: Executor, loader: MeasuredLoader, steps: int, deadline: float,
                on_step: Callable[[TrainState], None] = lambda s: None) -> TrainState:
    """Run the executor's ``train_epoch`` over as many epochs of ``loader`` as it takes to
    make ``steps`` optimizer steps, or until ``time.perf_counter()`` passes ``deadline``
    (checked after each step); ``on_step`` runs after every step."""
    state = TrainState()

    def step_hook(s: TrainState) -> bool:
        on_step(s)
        return s.step >= steps or time.perf_counter() > deadline

    while state.step < steps and time.perf_counter() <= deadline:
        loader.set_epoch(state.epoch)
        if executor.train_epoch(loader, state, on_step=step_hook):
            state.epoch += 1
    return state


def mark(marks: StepMarks, step: int, loader: MeasuredLoader, device: torch.device) -> None:
    """Record the wall clock (after the device's queued work) and the loader's counters."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    marks.at[step] = {"time": time.perf_counter(), **loader.counters()}
