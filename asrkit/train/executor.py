"""The train and CV loops of one epoch: accumulation, clipping, non-finite steps, logging.

Accumulation semantics (single process, DDP and FSDP alike: ``asrkit.train.engines``):

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
decisions from them.  After each step the executor yields a :class:`StepResult`: this rank's
utterances in the step (0 when it was skipped), the number of ranks asking to stop, and the
numbers of the train log line when the step wrote one; it holds no per-step state for its
caller to read.

Group boundaries and the has-next safety net (DDP): the executor reads its loader **one
batch ahead**, so before each micro-batch it knows whether this rank has another batch.
A micro-batch is the last of its group when its position completes ``accum_grad`` or when
this rank has no next batch; it runs forward/backward with the engine's gradient exchange
(DDP's all-reduce, FSDP's reduce-scatter), the others without (``model.no_sync()``).  So
every group makes, on every rank, exactly one synchronising backward (and DDP's buffer
broadcast in its first forward) followed by the step all-reduce, whatever the number of
micro-batches each rank has in it: ranks never wait in different collectives.  The sampler
gives every rank the same number of batches, so the groups are the same everywhere.  If not
(a sampler bug):

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
from typing import Callable, Iterator, Optional

import torch

from asrkit.models.ctc import host_lengths as ctc_host_lengths_given
from asrkit.models.chunks import ChunkTraining, micro_batch_index
from asrkit.progress import ProgressReport, clock
from asrkit.train.counters import TrainState
from asrkit.train.dist import DistContext, unwrap
from asrkit.train.engines.base import TrainingEngine
from asrkit.train.engines.ddp import DdpEngine
from asrkit.train.grads import clip_coefficient, scale_gradients, to_device_async
from asrkit.train.loss_sums import Window, cv_means, merge_names, summed_names
from asrkit.train.read_ahead import consumed_position, mark_consumed, read_ahead

log = logging.getLogger("asrkit.train")


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had non-finite gradients."""


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one accumulation group's optimizer step did, as :meth:`Executor.steps` yields it
    (the step is already counted in its ``TrainState``)."""

    utterances: int     # this rank's utterances in the group when its step was applied, else 0
    stop_requests: int  # ranks asking to stop, summed in the step's all-reduce: the same on every rank
    scalars: Optional[dict[str, float]] = None  # the numbers of the train log line this step wrote, if any


class Executor:
    """Trains and evaluates ``model``: owns what an optimizer step changes -- the model, the
    optimizer, the scheduler, the fp16 ``scaler`` and the weight ``ema``
    (``asrkit.train.ema.WeightEma``, updated after each applied step; None: no EMA) -- and
    steps it with ``cfg`` through the training ``engine`` that wrapped ``model``
    (``asrkit.train.engines``; default: ``torch_ddp``'s).  ``progress``: a bar of each epoch's
    batches (``asrkit.progress``); None shows it on rank 0 when stderr is a terminal."""

    def __init__(self, cfg, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 ctx: DistContext, model_dir: Path, *, scaler: Optional[torch.amp.GradScaler] = None,
                 progress: Optional[bool] = None, ema=None, engine: Optional[TrainingEngine] = None):
        self.cfg = cfg
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.ctx = ctx
        self.model_dir = Path(model_dir)
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.length_normalized = bool(getattr(unwrap(model), "length_normalized_loss", False))
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.progress = sys.stderr.isatty() and ctx.is_main if progress is None else progress
        self.autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.dtype)
        self.ema = ema
        self.chunks = ChunkTraining.from_config(cfg)  # attention context per micro-batch
        self.engine = engine or DdpEngine(cfg, ctx)

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

    def _forward(self, model: torch.nn.Module, batch: dict, chunk: tuple[int, int], host: Optional[dict] = None) -> dict:
        """``model``'s loss dict for ``batch`` with the chunk choice ``(chunk_size, num_left_chunks)``;
        ``host``: the same batch on the host, whose lengths CTC reads there (``asrkit.models.ctc``:
        no host sync for them on a GPU)."""
        lengths = (ctc_host_lengths_given(host["feats_lengths"], host["target_lengths"])
                   if host is not None and self.ctx.device.type != "cpu" else contextlib.nullcontext())
        with self._autocast(), lengths:
            return model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"], *chunk)

    # ------------------------------------------------------------------ training

    def train_epoch(self, loader, state: TrainState,
                    on_step: Callable[[TrainState], bool] = lambda s: False) -> bool:
        """:meth:`steps` for a caller that needs no :class:`StepResult` (benchmarks, tests):
        ``on_step(state)`` runs after every optimizer step, and True from it stops the epoch
        there.  Returns True if the epoch ran to its end, False if ``on_step`` stopped it."""
        with contextlib.closing(self.steps(loader, state)) as results:
            for _ in results:
                if on_step(state):
                    return False
        return True

    def steps(self, loader, state: TrainState,
              stop_requested: Callable[[], bool] = lambda: False) -> Iterator[StepResult]:
        """Train on the rest of ``loader``'s current epoch, yielding a :class:`StepResult`
        after each accumulation group's optimizer step, applied or skipped.

        ``stop_requested()`` says whether this rank wants to stop (it received a signal); it
        is read before each step's all-reduce, which sums it over the ranks into
        ``StepResult.stop_requests``.  The caller stops the epoch after a step by asking for
        no further result (close the iterator); it must decide the same on every rank.  The
        iteration ends when the epoch has ended on every rank (see the module docstring for
        ranks whose batch counts differ)."""
        self.model.train()
        accum = self.cfg.accum_grad
        n_batches = len(loader)
        position = consumed_position(loader)  # batches of this epoch already consumed (resume)
        group: list[dict] = []
        group_count = 0
        group_nonfinite = torch.zeros((), dtype=torch.int64, device=self.ctx.device)
        window = Window()
        epoch_start = time.perf_counter()
        start_position = position
        bar = (ProgressReport(n_batches, f"epoch {state.epoch}", "batch", log, terminal=True, done=position)
               if self.progress else None)
        try:
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
                with self.engine.gradient_sync(self.model, sync=last_in_group):
                    out = self._forward(self.model, dev_batch, chunk, host=batch)
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
                    grad_norm, stop_requests, all_have_next = self._optimizer_step(
                        group_count, group_nonfinite, group, state, has_next, stop_requested)
                    applied = grad_norm is not None
                    utterances = sum(int(b["feats_lengths"].numel()) for b in group) if applied else 0
                    group, group_count = [], 0
                    group_nonfinite = torch.zeros_like(group_nonfinite)
                    scalars = None
                    if applied and state.step % self.cfg.log_interval == 0:
                        scalars = self._log_train(window, state, grad_norm, position, n_batches, epoch_start,
                                                  start_position)
                        window = Window()
                    yield StepResult(utterances, stop_requests, scalars)
                    if not all_have_next:
                        break
                if bar is not None:
                    bar.advance_to(position)
                t_ready = time.perf_counter()
            self._set_phase(f"after the train batches of epoch {state.epoch} (CV, checkpoint, rank-0 decisions)",
                            "other")
        finally:
            if bar is not None:
                bar.close()

    def _set_phase(self, text: str, kind: str) -> None:
        """What this rank does now, for the stuck-rank diagnosis (``asrkit.train.dist.monitor.RankMonitor``)."""
        if self.ctx.monitor is not None:
            self.ctx.monitor.set_phase(text, kind)

    def _agree_on_the_end(self, has_next: bool, ranks_with_next: int, micro_batches: float,
                          micro_batches_sq: float, state: TrainState) -> bool:
        """From the step all-reduce: does every rank go on after this group?  Logs the
        sampler bugs the sums reveal (identical values, hence decisions, on every rank)."""
        world = self.ctx.world_size
        if 0 < ranks_with_next < world and has_next:
            log.error("rank %d: %d of %d rank(s) ran out of batches at step %d; stopping this epoch here, "
                      "its remaining batches untrained (the batch counts were unequal -- a sampler bug)",
                      self.ctx.rank, world - ranks_with_next, world, state.step)
        elif ranks_with_next == 0 and micro_batches_sq * world != micro_batches * micro_batches:
            log.error("rank %d: the ranks' last accumulation groups of this epoch held different numbers of "
                      "micro-batches (%d in all over %d ranks; the batch counts were unequal -- a sampler bug)",
                      self.ctx.rank, int(micro_batches), world)
        return ranks_with_next == world

    def _optimizer_step(self, local_count: int, local_nonfinite: torch.Tensor, group: list[dict],
                        state: TrainState, has_next: bool = False,
                        stop_requested: Callable[[], bool] = lambda: False) -> tuple[Optional[float], int, bool]:
        """Agree with the other ranks (one all-reduce: count, stop requests, non-finite
        losses, ranks with a next batch, micro-batches and their square), then normalise,
        clip and apply the accumulated gradients.  Returns ``(grad norm, or None when the
        step was skipped; ranks asking to stop; every rank has a batch after this group)``.
        The host reads the device once: the all-reduced sums together with the gradient norm
        (``asrkit.train.grads``)."""
        # (unscaling records the scaler's inf check on the device, no sync; a group whose
        # backward made no gradient has nothing for the scaler to check or update)
        scaler = self.scaler if any(p.grad is not None for p in self.params) else None
        if scaler:
            scaler.unscale_(self.optimizer)
        raw_norm = self.engine.gradient_norm(self.params, self.ctx.device)  # identical on every rank
        n = float(len(group))
        stop = float(stop_requested())
        local = to_device_async([local_count, stop, 0.0, float(has_next), n, n * n], self.ctx.device)
        local[2:3].add_(local_nonfinite.reshape(1).to(torch.float64))
        summed = self.ctx.all_reduce_sum(local)
        global_count, stop_requests, nonfinite_losses, with_next, micro, micro_sq, raw = \
            torch.cat([summed, raw_norm.reshape(1).to(summed)]).tolist()  # the step's one host sync
        agreed = int(stop_requests), self._agree_on_the_end(has_next, int(with_next), micro, micro_sq, state)
        try:
            if global_count == 0:
                state.empty_groups += 1
                log.warning("step %d: no utterance left in this accumulation group on any rank "
                            "(all skipped as bad data); no optimizer step", state.step)
                return None, *agreed
            if nonfinite_losses:
                self._count_fault(group, state, f"the loss of {int(nonfinite_losses)} micro-batch(es) "
                                                f"(over all ranks) is not finite")
                return None, *agreed
            # DDP (FSDP too) averaged the per-rank gradient sums over world_size; undo that and divide
            # by the global count: grad = (sum over ranks and micro-batches) / global_count.
            factor = self.ctx.world_size / global_count
            grad_norm = factor * raw
            if not math.isfinite(grad_norm):
                if self.scaler:  # fp16 calibration: no step; the scaler's update lowers its scale
                    state.scaler_skips += 1
                    return None, *agreed
                self._count_fault(group, state, f"gradient norm is {grad_norm}")
                return None, *agreed
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
        return grad_norm, *agreed

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

    # ------------------------------------------------------------------ logging

    def _log_train(self, w: Window, state: TrainState, grad_norm: float, position: int,
                   n_batches: int, epoch_start: float, start_position: int) -> dict[str, float]:
        """Log the train line of the steps in ``w``; returns its numbers by name
        (``asrkit.train.loss_sums.Window.train_numbers``)."""
        numbers = w.train_numbers(self.length_normalized, self.optimizer.param_groups[0]["lr"], grad_norm)
        eta = (time.perf_counter() - epoch_start) / max(position - start_position, 1) * (n_batches - position)
        own = ("loss", "lr", "grad_norm", "frames_per_s", "data_wait_share")
        log.info(" | ".join([f"epoch {state.epoch} step {state.step} batch {position}/{n_batches}",
                             f"loss {numbers['loss']:.4f}",
                             *(f"{k} {v:.4f}" for k, v in numbers.items() if k not in own),
                             f"lr {numbers['lr']:.3e}", f"grad_norm {grad_norm:.3f}",
                             f"{numbers['frames_per_s']:.0f} frames/s",
                             f"data_wait {100 * numbers['data_wait_share']:.1f}%", f"eta {clock(eta)}",
                             *filter(None, [self.engine.step_report()])]))
        return numbers

    # ------------------------------------------------------------------ CV

    def cv(self, loader) -> dict:
        """Loss and accuracy over ``loader`` (this rank's shard), summed over all ranks.

        Every rank returns the same numbers.  The bare model is used (no DDP hooks), so
        under DDP ranks need not run the same number of CV batches; under FSDP each forward
        all-gathers, and they must -- the sampler gives them equal counts.
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
            out = self._forward(model, self._to_device(batch), self.chunks.for_evaluation(), host=batch)
            for k in summed_names(out):
                sums[k] = sums.get(k, 0.0) + float(out[k])
            utts += b_utts
            tokens += b_tokens
        model.train(was_training)
        self.engine.after_evaluation(model)
        names = merge_names(self.ctx.all_gather(list(sums)))  # ranks agree on the vector's layout
        values = self.ctx.sum_floats([sums.get(k, 0.0) for k in names] + [float(utts), float(tokens)])
        return dict(zip(names, values[:len(names)])), int(values[-2]), int(values[-1])
