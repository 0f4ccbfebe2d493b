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

One all-reduce per optimizer step -- the only collective the executor itself makes while
training -- carries six sums: the group's utterance (or token) count, the number of ranks
asking to stop (``asrkit.train.preemption``), the number of micro-batches with a
non-finite loss, the number of ranks that have a batch after this group, and the number
of micro-batches in the group and its square.  Every rank takes the same skip/stop
decisions from them.  ``trained_utts`` counts the utterances of this rank whose optimizer
step was applied in the current epoch (the trainer sums it over ranks for the epoch report).

Group boundaries and the has-next safety net (DDP): the executor reads its loader **one
batch ahead**, so before each micro-batch it knows whether this rank has another batch.
A micro-batch is the last of its group when its position completes ``accum_grad`` or when
this rank has no next batch; it runs forward/backward with DDP's gradient all-reduce, the
others under ``model.no_sync()``.  So every group makes, on every rank, exactly one
synchronising backward (and DDP's buffer broadcast in its first forward) followed by the
step all-reduce, whatever the number of micro-batches each rank has in it: ranks never
wait in different collectives.  The sampler gives every rank the same number of batches,
so the groups are the same everywhere.  If not (a sampler bug):

* a rank without a next batch ends its epoch after the step of its last group; the step
  all-reduce tells every rank that some rank has no next batch, and all end the epoch
  after that same step (the ranks that still had batches log an error: those are not
  trained this epoch) -- nobody waits in a collective the others never reach;
* when all ranks end together but their last groups held different numbers of
  micro-batches, every rank logs an error (the step is applied: it normalises by the
  global count of what was trained).

There is no collective per micro-batch: in steady state a step of ``accum_grad``
micro-batches costs one step all-reduce plus DDP's own gradient all-reduce (and buffer
broadcast) -- the same as one micro-batch.  Reading ahead does not move the resume
position: a batch counts as consumed (``sampler.mark_consumed``) when it is trained, not
when it is read.

Streaming (U2/U2++) training: each micro-batch trains with the chunk choice
``asrkit.models.chunks`` draws from (seed, the step its group applies, its global index in
the group: ``(position mod accum_grad) · world_size + rank``), CV with full context (or the
static chunk); the same data gets the same choice after a resume and under any world size
with the same ``world_size · accum_grad``.

Outputs of the model: see ``asrkit.train.loss_sums`` for the contract (``loss`` is
backpropagated; every ``loss_<name>`` is summed, all-reduced in CV and reported
normalised like ``loss``; a ``<name>_correct``/``<name>_total`` pair becomes the ratio
``<name>``).
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

from asrkit.models.chunks import ChunkTraining, micro_batch_index
from asrkit.train.dist import DistContext, no_sync_if, unwrap
from asrkit.train.grads import clip_coefficient, gradient_norm, scale_gradients, to_device_async
from asrkit.progress import clock
from asrkit.train.loss_sums import Window, cv_means, merge_names, report, summed_names
from asrkit.train.reading import consumed_position, mark_consumed, read_ahead

log = logging.getLogger("asrkit.train")


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


class Executor:
    """Runs epochs of training and CV for an already-built model/optimizer/scheduler."""

    def __init__(self, cfg, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 ctx: DistContext, model_dir: Path, *, scaler: Optional[torch.amp.GradScaler] = None,
                 writer=None, progress: Optional[bool] = None, preemption=None, ema=None):
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
        self.ema = ema                # asrkit.train.ema.WeightEma (or None): updated after each applied step
        self.stop_requests = 0        # ranks asking to stop, from the last step's all-reduce
        self.all_ranks_have_next = True  # from the last step's all-reduce: every rank has a next batch
        self.trained_utts = 0         # this rank's utterances in applied steps, this epoch
        self.chunks = ChunkTraining.from_config(cfg)  # attention context per micro-batch

    # ------------------------------------------------------------------ helpers

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=self.autocast_dtype)

    def _to_device(self, batch: dict) -> dict:
        dev = self.ctx.device
        nb = dev.type == "cuda"
        if dev.type != "cpu":  # the encoder checks lengths on the host only (a device check would sync)
            unwrap(self.model).encoder.check_input_lengths(batch["feats_lengths"])
        return {k: (v.to(dev, non_blocking=nb) if torch.is_tensor(v) else v) for k, v in batch.items()}

    @staticmethod
    def _counts(batch: dict) -> tuple[int, int, int]:
        """(utterances, tokens incl. <eos>, real frames) of a batch, from CPU tensors."""
        utts = int(batch["feats_lengths"].numel())
        tokens = int(batch["target_lengths"].sum()) + utts
        frames = int(batch["feats_lengths"].sum())
        return utts, tokens, frames

    def _forward(self, model: torch.nn.Module, batch: dict, chunk: tuple[int, int]) -> dict:
        """``model``'s loss dict for ``batch`` with the chunk choice ``(chunk_size, num_left_chunks)``."""
        with self._autocast():
            return model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"], *chunk)

    # ------------------------------------------------------------------ training

    def train_epoch(self, loader, state: TrainState,
                    on_step: Callable[[TrainState], bool] = lambda s: False) -> bool:
        """Train on the rest of ``loader``'s current epoch.

        ``on_step(state)`` runs after every optimizer step (checkpointing, CV); when it
        returns True the epoch stops there (the caller decided, identically on every rank).
        Returns True if the epoch ran to its end (on every rank: see the module docstring
        for ranks whose batch counts differ), False if ``on_step`` stopped it.
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
        for batch, has_next in read_ahead(loader):
            wait = time.perf_counter() - t_ready
            last_in_group = (position + 1) % accum == 0 or not has_next
            mark_consumed(loader, position)
            self._set_phase(f"training on train batch {position + 1}/{n_batches} of epoch {state.epoch} "
                            f"(forward, backward{' with the gradient all-reduce' if last_in_group else ''})",
                            "compute")
            utts, tokens, frames = self._counts(batch)
            dev_batch = self._to_device(batch)
            chunk = self.chunks.for_training(
                state.step, micro_batch_index(position, accum, self.ctx.rank, self.ctx.world_size))
            with no_sync_if(self.model, skip_sync=not last_in_group):
                out = self._forward(self.model, dev_batch, chunk)
                loss = out["loss"]
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            group_nonfinite += ~torch.isfinite(loss.detach())  # stays on the device: no sync here
            group_count += tokens if self.length_normalized else utts
            group.append(batch)
            window.add(out, utts, tokens, frames, wait)
            position += 1
            if last_in_group:
                self._set_phase(f"in the step all-reduce after train batch {position}/{n_batches} of epoch "
                                f"{state.epoch}", "collective")
                grad_norm = self._optimizer_step(group_count, group_nonfinite, group, state, has_next)
                group, group_count = [], 0
                group_nonfinite = torch.zeros_like(group_nonfinite)
                if grad_norm is not None and state.step % self.cfg.log_interval == 0:
                    self._log_train(window, state, grad_norm, position, n_batches, epoch_start, start_position)
                    window = Window()
                if on_step(state):
                    return False
                if not self.all_ranks_have_next:
                    break
            if self.progress:
                self._progress(state, position, n_batches)
            t_ready = time.perf_counter()
        self._set_phase(f"after the train batches of epoch {state.epoch} (CV, checkpoint, rank-0 decisions)", "other")
        if self.progress:
            sys.stderr.write("\n")
        return True

    def _set_phase(self, text: str, kind: str) -> None:
        """What this rank does now, for the stuck-rank diagnosis (``asrkit.train.dist.monitor.RankMonitor``)."""
        if self.ctx.monitor is not None:
            self.ctx.monitor.set_phase(text, kind)

    def _agree_on_the_end(self, has_next: bool, ranks_with_next: int, micro_batches: float,
                          micro_batches_sq: float, state: TrainState) -> None:
        """From the step all-reduce: does every rank go on after this group?  Logs the
        sampler bugs the sums reveal (identical values, hence decisions, on every rank)."""
        world = self.ctx.world_size
        self.all_ranks_have_next = ranks_with_next == world
        if 0 < ranks_with_next < world and has_next:
            log.error("rank %d: %d of %d rank(s) ran out of batches at step %d; stopping this epoch here, "
                      "its remaining batches untrained (the batch counts were unequal -- a sampler bug)",
                      self.ctx.rank, world - ranks_with_next, world, state.step)
        elif ranks_with_next == 0 and micro_batches_sq * world != micro_batches * micro_batches:
            log.error("rank %d: the ranks' last accumulation groups of this epoch held different numbers of "
                      "micro-batches (%d in all over %d ranks; the batch counts were unequal -- a sampler bug)",
                      self.ctx.rank, int(micro_batches), world)

    def _optimizer_step(self, local_count: int, local_nonfinite: torch.Tensor, group: list[dict],
                        state: TrainState, has_next: bool = False) -> Optional[float]:
        """Agree with the other ranks (one all-reduce: count, stop requests, non-finite
        losses, ranks with a next batch, micro-batches and their square), then normalise,
        clip and apply the accumulated gradients; returns the grad norm, or None when the
        step was skipped.  The host reads the device once: the all-reduced sums together
        with the gradient norm (``asrkit.train.grads``)."""
        # (unscaling records the scaler's inf check on the device, no sync; a group whose
        # backward made no gradient has nothing for the scaler to check or update)
        scaler = self.scaler if any(p.grad is not None for p in self.params) else None
        if scaler:
            scaler.unscale_(self.optimizer)
        raw_norm = gradient_norm(self.params, self.ctx.device)  # identical on every rank after DDP
        flag = self.preemption.flag() if self.preemption is not None else 0.0
        n = float(len(group))
        local = to_device_async([local_count, flag, 0.0, float(has_next), n, n * n], self.ctx.device)
        local[2:3].add_(local_nonfinite.reshape(1).to(torch.float64))
        summed = self.ctx.all_reduce_sum(local)
        global_count, stop_requests, nonfinite_losses, with_next, micro, micro_sq, raw = \
            torch.cat([summed, raw_norm.reshape(1).to(summed)]).tolist()  # the step's one host sync
        self.stop_requests = int(stop_requests)
        self._agree_on_the_end(has_next, int(with_next), micro, micro_sq, state)
        try:
            if global_count == 0:
                state.empty_groups += 1
                log.warning("step %d: no utterance left in this accumulation group on any rank "
                            "(all skipped as bad data); no optimizer step", state.step)
                return None
            if nonfinite_losses:
                return self._count_fault(group, state, f"the loss of {int(nonfinite_losses)} micro-batch(es) "
                                                       f"(over all ranks) is not finite")
            # DDP averaged the per-rank gradient sums over world_size; undo that and divide
            # by the global count: grad = (sum over ranks and micro-batches) / global_count.
            factor = self.ctx.world_size / global_count
            grad_norm = factor * raw
            if not math.isfinite(grad_norm):
                if self.scaler:  # fp16 calibration: no step; the scaler's update lowers its scale
                    state.scaler_skips += 1
                    return None
                return self._count_fault(group, state, f"gradient norm is {grad_norm}")
            scale_gradients(self.params, factor * clip_coefficient(grad_norm, self.cfg.grad_clip))
            # (with fp16 the gradients are unscaled and finite -- the scaler's inf check is
            # clear -- so the optimizer steps directly; GradScaler.step would read that check
            # back to the host)
            self.optimizer.step()
        finally:
            if scaler:  # every step, applied or not, ends with the scaler's update
                scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update(unwrap(self.model))
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
        for k, v in report(w.sums, lambda total: total * per_utt).items():
            if k != "loss":
                scalars[k] = v
                parts.append(f"{k} {v:.4f}")
        parts += [f"lr {lr:.3e}", f"grad_norm {grad_norm:.3f}", f"{scalars['frames_per_s']:.0f} frames/s",
                  f"data_wait {100 * scalars['data_wait_share']:.1f}%", f"eta {clock(eta)}"]
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

    def cv(self, loader) -> dict:
        """Loss and accuracy over ``loader`` (this rank's shard), summed over all ranks.

        Every rank returns the same numbers.  The bare model is used (no DDP hooks), so
        ranks need not run the same number of CV batches -- though the sampler gives
        them equal counts anyway.
        """
        return cv_means(self.cv_sums(loader), self.length_normalized)

    @torch.no_grad()
    def cv_sums(self, loader) -> tuple[dict, int, int]:
        """The summed losses, utterances and tokens of ``loader`` over all ranks (what
        ``asrkit.train.loss_sums.cv_means`` turns into the reported means; sums of several
        CV lists add up)."""
        model = unwrap(self.model)
        was_training = model.training
        model.eval()
        sums: dict[str, float] = {}
        utts = tokens = 0
        for batch in loader:
            b_utts, b_tokens, _ = self._counts(batch)
            if b_utts == 0:
                continue
            out = self._forward(model, self._to_device(batch), self.chunks.for_evaluation())
            for k in summed_names(out):
                sums[k] = sums.get(k, 0.0) + float(out[k])
            utts += b_utts
            tokens += b_tokens
        model.train(was_training)
        names = merge_names(self.ctx.all_gather(list(sums)))  # ranks agree on the vector's layout
        values = self.ctx.sum_floats([sums.get(k, 0.0) for k in names] + [float(utts), float(tokens)])
        return dict(zip(names, values[:len(names)])), int(values[-2]), int(values[-1])
