"""The train and CV loops of one epoch: accumulation, clipping, non-finite steps, logging.

Accumulation semantics (single process and DDP alike):

* micro-batches are grouped by their position in the epoch's plan: positions
  ``[k·accum_grad, (k+1)·accum_grad)`` form group k; the optimizer steps after the last
  micro-batch of every group, i.e. after ``accum_grad`` micro-batches (not after the first);
* **an unfinished group at the end of the epoch still makes one optimizer step**, over the
  micro-batches it has (no gradient is carried into the next epoch, no sample is wasted);
* the model returns loss *sums*; gradients of the whole group are divided by the number of
  utterances (or tokens, with ``length_normalized_loss``) in the group summed over all
  ranks, so the update equals one step on the concatenated global batch;
* gradients are clipped to ``grad_clip`` after unscaling (AMP) and normalising;
* a step is skipped (weights, optimizer state and scheduler untouched) and counted as a
  fault when the loss of any of its micro-batches, on any rank, is not finite (the count
  travels in the per-step all-reduce, so every rank skips the same step even when only one
  rank's loss overflowed and the gradients stayed finite), or when the global gradient norm
  is not finite; after ``max_nonfinite_steps`` such steps in a row the run stops and the
  offending micro-batches are saved to ``<model_dir>/nonfinite_step<N>_rank<r>.pt``.
  With fp16 the GradScaler's own calibration skips are counted separately, not as faults;
* the scheduler steps once per real optimizer step; a group with no utterance on any rank
  (every sample skipped as bad data) makes no step.

One all-reduce per optimizer step carries three sums: the group's utterance (or token)
count, the number of micro-batches with a non-finite loss and the number of ranks asking
to stop (``asrkit.train.preemption``): every rank takes the same skip/stop decisions.
``trained_utts`` counts the utterances of this rank whose optimizer step was applied in
the current epoch (the trainer sums it over ranks for the epoch report).

With DDP every rank has the same number of batches per epoch (the sampler guarantees
it), so every rank reaches the same group boundaries; ``model.no_sync()`` is used for
all but the last micro-batch of each group.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from asrkit.train.distributed import DistContext, iterate_together, no_sync_if, unwrap

log = logging.getLogger("asrkit.train")

LOSS_KEYS = ("loss", "loss_ctc", "loss_att", "acc_correct", "acc_total")


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had non-finite gradients."""


@dataclasses.dataclass
class TrainState:
    """Counters that survive a resume (saved in every checkpoint)."""

    epoch: int = 0              # epoch being trained (0-based)
    step: int = 0               # optimizer steps taken so far
    nonfinite_total: int = 0    # steps skipped for non-finite gradients (faults)
    nonfinite_in_row: int = 0
    scaler_skips: int = 0       # fp16 GradScaler calibration skips (not faults)
    empty_groups: int = 0       # groups with no utterance on any rank (all skipped)
    best_cv_loss: Optional[float] = None
    epochs_without_improvement: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainState":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


class Window:
    """Sums over the batches since the last log line."""

    def __init__(self):
        self.sums = {k: 0.0 for k in LOSS_KEYS}
        self.utts = self.tokens = self.frames = self.batches = 0
        self.data_wait = 0.0
        self.start = time.perf_counter()
        self._pending: list[dict] = []

    def add(self, out: dict, utts: int, tokens: int, frames: int, wait: float) -> None:
        self._pending.append({k: out[k].detach() for k in LOSS_KEYS if out.get(k) is not None})
        self.utts += utts
        self.tokens += tokens
        self.frames += frames
        self.batches += 1
        self.data_wait += wait

    def flush(self) -> None:
        """Move the pending device tensors to Python numbers (one sync per log line)."""
        for item in self._pending:
            for k, v in item.items():
                self.sums[k] += float(v)
        self._pending.clear()


class Executor:
    """Runs epochs of training and CV for an already-built model/optimizer/scheduler."""

    def __init__(self, cfg, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 ctx: DistContext, model_dir: Path, *, scaler: Optional[torch.amp.GradScaler] = None,
                 writer=None, progress: Optional[bool] = None, preemption=None):
        self.cfg = cfg
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.ctx = ctx
        self.model_dir = Path(model_dir)
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.writer = writer
        self.length_normalized = bool(getattr(unwrap(model), "length_normalized_loss", False))
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.progress = sys.stderr.isatty() and ctx.is_main if progress is None else progress
        self.autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.dtype)
        self.preemption = preemption  # asrkit.train.preemption.Preemption (or None)
        self.stop_requests = 0        # ranks asking to stop, from the last step's all-reduce
        self.trained_utts = 0         # this rank's utterances in applied steps, this epoch

    # ------------------------------------------------------------------ helpers

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=self.autocast_dtype)

    def _to_device(self, batch: dict) -> dict:
        dev = self.ctx.device
        nb = dev.type == "cuda"
        return {k: (v.to(dev, non_blocking=nb) if torch.is_tensor(v) else v) for k, v in batch.items()}

    @staticmethod
    def _counts(batch: dict) -> tuple[int, int, int]:
        """(utterances, tokens incl. <eos>, real frames) of a batch, from CPU tensors."""
        utts = int(batch["feats_lengths"].numel())
        tokens = int(batch["target_lengths"].sum()) + utts
        frames = int(batch["feats_lengths"].sum())
        return utts, tokens, frames

    def _forward(self, batch: dict) -> dict:
        with self._autocast():
            return self.model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])

    # ------------------------------------------------------------------ training

    def train_epoch(self, loader, state: TrainState,
                    on_step: Callable[[TrainState], bool] = lambda s: False) -> bool:
        """Train on the rest of ``loader``'s current epoch.

        ``on_step(state)`` runs after every optimizer step (checkpointing, CV); when it
        returns True the epoch stops there (the caller decided, identically on every rank).
        Returns True if the epoch ran to its end, False if ``on_step`` stopped it.
        """
        self.model.train()
        accum = self.cfg.accum_grad
        n_batches = len(loader)
        position = consumed_position(loader)  # batches of this epoch already consumed (resume)
        group: list[dict] = []
        group_count = 0
        group_nonfinite = torch.zeros((), dtype=torch.int64, device=self.ctx.device)
        self.trained_utts = 0
        window = Window()
        epoch_start = time.perf_counter()
        start_position = position
        t_ready = time.perf_counter()
        for batch in iterate_together(loader, self.ctx):
            wait = time.perf_counter() - t_ready
            last_in_group = (position + 1) % accum == 0 or position + 1 == n_batches
            utts, tokens, frames = self._counts(batch)
            dev_batch = self._to_device(batch)
            with no_sync_if(self.model, skip_sync=not last_in_group):
                out = self._forward(dev_batch)
                loss = out["loss"]
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            group_nonfinite += ~torch.isfinite(loss.detach())  # stays on the device: no sync here
            group_count += tokens if self.length_normalized else utts
            group.append(batch)
            window.add(out, utts, tokens, frames, wait)
            position += 1
            if last_in_group:
                grad_norm = self._optimizer_step(group_count, group_nonfinite, group, state)
                group, group_count = [], 0
                group_nonfinite = torch.zeros_like(group_nonfinite)
                if grad_norm is not None and state.step % self.cfg.log_interval == 0:
                    self._log_train(window, state, grad_norm, position, n_batches, epoch_start, start_position)
                    window = Window()
                if on_step(state):
                    return False
            if self.progress:
                self._progress(state, position, n_batches)
            t_ready = time.perf_counter()
        if self.progress:
            sys.stderr.write("\n")
        return True

    def _optimizer_step(self, local_count: int, local_nonfinite: torch.Tensor, group: list[dict],
                        state: TrainState) -> Optional[float]:
        """Agree with the other ranks (one all-reduce: count, non-finite losses, stop
        requests), then normalise, clip and apply the accumulated gradients; returns the
        grad norm, or None when the step was skipped."""
        flag = self.preemption.flag() if self.preemption is not None else 0.0
        local = torch.cat([torch.tensor([float(local_count), flag], dtype=torch.float64, device=self.ctx.device),
                           local_nonfinite.reshape(1).to(device=self.ctx.device, dtype=torch.float64)])
        global_count, stop_requests, nonfinite_losses = self.ctx.all_reduce_sum(local).tolist()
        self.stop_requests = int(stop_requests)
        if global_count == 0:
            self.optimizer.zero_grad(set_to_none=True)
            state.empty_groups += 1
            log.warning("step %d: no utterance left in this accumulation group on any rank "
                        "(all skipped as bad data); no optimizer step", state.step)
            return None
        if nonfinite_losses:
            self.optimizer.zero_grad(set_to_none=True)
            return self._count_fault(group, state, f"the loss of {int(nonfinite_losses)} micro-batch(es) "
                                                   f"(over all ranks) is not finite")
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        # DDP averaged the per-rank gradient sums over world_size; undo that and divide
        # by the global count: grad = (sum over ranks and micro-batches) / global_count.
        factor = self.ctx.world_size / global_count
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(factor)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip))
        if not math.isfinite(grad_norm):
            if self.scaler:  # fp16 calibration: the scaler skips the step and lowers its scale
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad(set_to_none=True)
                state.scaler_skips += 1
                return None
            self.optimizer.zero_grad(set_to_none=True)
            return self._count_fault(group, state, f"gradient norm is {grad_norm}")
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.nonfinite_in_row = 0
        self.trained_utts += sum(int(b["feats_lengths"].numel()) for b in group)
        return grad_norm

    def _count_fault(self, group: list[dict], state: TrainState, what: str) -> None:
        """Count a skipped non-finite step (gradients already zeroed); after
        ``max_nonfinite_steps`` in a row, save the group's batches and raise."""
        state.nonfinite_total += 1
        state.nonfinite_in_row += 1
        keys = [k for b in group for k in b["keys"]]
        log.warning("step %d: %s; step skipped (%d in a row, %d in total); batch keys: %s",
                    state.step, what, state.nonfinite_in_row, state.nonfinite_total,
                    " ".join(keys[:20]) + (" ..." if len(keys) > 20 else ""))
        if state.nonfinite_in_row >= self.cfg.max_nonfinite_steps:
            path = self.model_dir / f"nonfinite_step{state.step}_rank{self.ctx.rank}.pt"
            torch.save([{k: v for k, v in b.items() if k != "skipped"} for b in group], path)
            raise NonFiniteError(
                f"{state.nonfinite_in_row} optimizer steps in a row were not finite "
                f"(max_nonfinite_steps={self.cfg.max_nonfinite_steps}; last: {what}); the last group's "
                f"batches are saved in {path}. Lower the learning rate, check the data, or raise grad_clip.")
        return None

    # ------------------------------------------------------------------ logging

    def _log_train(self, w: Window, state: TrainState, grad_norm: float, position: int,
                   n_batches: int, epoch_start: float, start_position: int) -> None:
        w.flush()
        elapsed = max(time.perf_counter() - w.start, 1e-9)
        per_utt = 1.0 / max(w.tokens if self.length_normalized else w.utts, 1)
        loss = w.sums["loss"] * per_utt
        lr = self.optimizer.param_groups[0]["lr"]
        epoch_elapsed = time.perf_counter() - epoch_start
        done = max(position - start_position, 1)
        eta = epoch_elapsed / done * (n_batches - position)
        parts = [f"epoch {state.epoch} step {state.step} batch {position}/{n_batches}",
                 f"loss {loss:.4f}"]
        scalars = {"loss": loss, "lr": lr, "grad_norm": grad_norm,
                   "frames_per_s": w.frames / elapsed, "data_wait_share": w.data_wait / elapsed}
        for k in ("loss_ctc", "loss_att"):
            if w.sums[k]:
                scalars[k] = w.sums[k] * per_utt
                parts.append(f"{k} {scalars[k]:.4f}")
        if w.sums["acc_total"]:
            scalars["acc"] = w.sums["acc_correct"] / w.sums["acc_total"]
            parts.append(f"acc {scalars['acc']:.4f}")
        parts += [f"lr {lr:.3e}", f"grad_norm {grad_norm:.3f}", f"{scalars['frames_per_s']:.0f} frames/s",
                  f"data_wait {100 * scalars['data_wait_share']:.1f}%", f"eta {_fmt_time(eta)}"]
        log.info(" | ".join(parts))
        if self.writer is not None:
            for k, v in scalars.items():
                self.writer.add_scalar(f"train/{k}", v, state.step)

    def _progress(self, state: TrainState, position: int, n_batches: int) -> None:
        width = 30
        filled = int(width * position / max(n_batches, 1))
        sys.stderr.write(f"\repoch {state.epoch} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{position}/{n_batches} step {state.step}")
        sys.stderr.flush()

    # ------------------------------------------------------------------ CV

    @torch.no_grad()
    def cv(self, loader) -> dict:
        """Loss and accuracy over ``loader`` (this rank's shard), summed over all ranks.

        Every rank returns the same numbers.  The bare model is used (no DDP hooks), so
        ranks need not run the same number of CV batches -- though the sampler gives
        them equal counts anyway.
        """
        model = unwrap(self.model)
        was_training = model.training
        model.eval()
        sums = {k: 0.0 for k in LOSS_KEYS}
        utts = tokens = 0
        for batch in loader:
            b_utts, b_tokens, _ = self._counts(batch)
            if b_utts == 0:
                continue
            dev_batch = self._to_device(batch)
            with self._autocast():
                out = model(dev_batch["feats"], dev_batch["feats_lengths"], dev_batch["target"],
                            dev_batch["target_lengths"])
            for k in LOSS_KEYS:
                if out.get(k) is not None:
                    sums[k] += float(out[k])
            utts += b_utts
            tokens += b_tokens
        model.train(was_training)
        values = self.ctx.sum_floats([sums[k] for k in LOSS_KEYS] + [float(utts), float(tokens)])
        total = dict(zip(LOSS_KEYS, values[:len(LOSS_KEYS)]))
        utts, tokens = int(values[-2]), int(values[-1])
        norm = max(tokens if self.length_normalized else utts, 1)
        result = {"loss": total["loss"] / norm, "num_utts": utts}
        for k in ("loss_ctc", "loss_att"):
            if total[k]:
                result[k] = total[k] / norm
        if total["acc_total"]:
            result["acc"] = total["acc_correct"] / total["acc_total"]
        return result


def consumed_position(loader) -> int:
    """Batches of the current epoch the trainer already consumed (non-zero after a resume)."""
    sampler = getattr(loader, "sampler", None)
    return int(getattr(sampler, "consumed", 0)) if sampler is not None else 0


def _fmt_time(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
