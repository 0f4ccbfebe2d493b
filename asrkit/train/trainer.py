"""Epoch loop around the Executor: CV, checkpoints, resume, early stopping, TensorBoard and
the stop signals.

Checkpoints (see ``asrkit.checkpoint``) are written by rank 0 (and a sharded run's shards,
``asrkit.train.engines``, by every rank):

* ``step_<N>.pt`` every ``save_interval`` optimizer steps (mid-epoch; it records the
  sampler position of the batches *consumed*, so a resume continues with exactly the
  next batch), the newest ``keep_checkpoint_max`` kept;
* ``epoch_<E>.pt`` after epoch E and its CV, with the CV loss in ``epoch_<E>.yaml``.

Every decision (save now, stop early, stop at ``max_steps``) depends only on values
that are identical on every rank (the step count, all-reduced CV numbers) and
time-independent; the early-stop decision is additionally taken on rank 0 and broadcast.
A stop signal (``asrkit.train.preemption``) is acted on at an optimizer-step boundary
from the number of ranks that received one, summed in the executor's per-step
all-reduce: every rank saves and stops at the same step.

Checkpoints hold the RNG states of every rank (gathered on rank 0), so each rank of a
resumed run with the same world size continues its own random stream (dropout): a run
stopped and resumed, on one rank or several, ends with the weights of an uninterrupted
run.  On another world size every rank takes rank 0's states.

A checkpoint rank 0 cannot write (full disk, file-size limit) stops every rank with a
:class:`~asrkit.checkpoint.CheckpointError` naming the file and the reason; the
earlier checkpoints are intact.

An epoch that ran to its end without training a single utterance on any rank, because
every sample was skipped as bad data, stops every rank with :class:`NoUsableDataError`
before its CV and its ``epoch_<E>.pt``; no ``step_<N>.pt`` is written before the first
optimizer step either, so such a run leaves no checkpoint that looks trained.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Optional

from asrkit.config import to_dict
from asrkit.finetune.schema import adaptation_difference
from asrkit.config_files import INPUT_DIGESTS, check_input_digests, input_digests
from asrkit.checkpoint.names import EPOCH, STEP, checkpoint_filename
from asrkit.checkpoint.weights import is_wenet_checkpoint
from asrkit.text.tokenizer import BpeModelError
from asrkit.text.units import UnitsError
from asrkit.checkpoint.load import CheckpointError, load_checkpoint
from asrkit.checkpoint.rng import capture_rng_state, restore_rng_state
from asrkit.checkpoint.save import prune_step_checkpoints, save_checkpoint
from asrkit.train.dist import DistContext, unwrap
from asrkit.train.dist.scaling import log_world_change
from asrkit.train.ema import WeightEma
from asrkit.train.counters import TrainState
from asrkit.train.executor import Executor, StepResult
from asrkit.train.loss_sums import cv_means
from asrkit.train.preemption import Preempted, Preemption
from asrkit.train.read_ahead import consumed_position

log = logging.getLogger("asrkit.train")


class NoUsableDataError(RuntimeError):
    """An epoch trained no utterance on any rank: every sample it read was skipped as bad
    data (the message gives the count per reason)."""


class Trainer:
    """Runs the epochs of one training stage from the built ``parts``
    (``asrkit.train.build.TrainingParts``): its :class:`~asrkit.train.executor.Executor`
    steps ``parts.model`` with ``parts.train_cfg`` (the world-size scaled ``accum_grad``);
    the trainer records ``parts.cfg`` (the config as written) in the checkpoints it writes
    into ``model_dir``, writes TensorBoard (rank 0) into ``tensorboard_dir`` (default
    ``<model_dir>/tensorboard``) and stops at an optimizer-step boundary on a stop signal
    (``asrkit.train.preemption``).  ``max_steps`` stops after that many optimizer steps in
    total."""

    def __init__(self, parts, ctx: DistContext, model_dir: str | Path, *, tensorboard_dir: Optional[str] = None,
                 max_steps: Optional[int] = None, progress: Optional[bool] = None):
        self.cfg = parts.train_cfg
        self.ctx = ctx
        self.train_loader = parts.train_loader
        self.cv_parts = parts.cv_parts  # [(CV list path, its loader)], one per list
        self.model_dir = Path(model_dir)
        self.tensorboard_dir = tensorboard_dir or str(self.model_dir / "tensorboard")
        self.config_dict = to_dict(parts.cfg)
        # the units/BPE files this run trains with, hashed once: what every checkpoint records
        # (and recognize, export and resume check the units against)
        self.input_digests = input_digests(parts.cfg)
        self.max_steps = max_steps
        self.state = TrainState()
        self.resumed_mid_epoch = False
        self.preemption = Preemption()
        self.writer = None  # TensorBoard's SummaryWriter on rank 0, while fit() runs
        self.comm_hook = parts.comm_hook  # asrkit.train.dist.comm_hooks.CommHook (or None): told of a resume
        self.adaptation = parts.adaptation  # asrkit.finetune.setup.Adaptation: what the model entry holds
        # weight EMA (asrkit.train.ema): the shadow of the unwrapped model, the same on every rank
        ema = WeightEma(unwrap(parts.model), self.cfg.ema_decay) if self.cfg.ema_decay else None
        self.executor = Executor(self.cfg, parts.model, parts.optimizer, parts.scheduler, ctx, self.model_dir,
                                 scaler=parts.scaler, progress=progress, ema=ema, engine=parts.engine)
        self.engine = self.executor.engine  # asrkit.train.engines: the checkpoints' model and optimizer entries

    # ------------------------------------------------------------------ checkpoints

    def _full_state(self, sampler_state: Optional[dict], rng_ranks: list, entries: dict) -> dict:
        """``entries``: the engine's (the whole model; the optimizer, or a sharded run's shards)."""
        ex = self.executor
        ema = {"ema": ex.ema.state_dict()} if ex.ema is not None else {}
        return {**ema,
            **self.adaptation.checkpoint_entries(entries.pop("model")),
            **entries,
            "scheduler": ex.scheduler.state_dict(),
            "world": {"world_size": self.ctx.world_size, "accum_grad": self.cfg.accum_grad},
            "scaler": ex.scaler.state_dict() if ex.scaler is not None else {},
            "train_state": self.state.to_dict(),
            "sampler": sampler_state,
            "rng": rng_ranks[0],
            "rng_ranks": rng_ranks,
            "config": self.config_dict,
            INPUT_DIGESTS: self.input_digests,
        }

    def save(self, kind: str, number: int, *, mid_epoch: bool, cv_loss: Optional[float] = None) -> Optional[Path]:
        """Rank 0 writes the checkpoint ``kind`` (``asrkit.checkpoint.names.STEP`` or
        ``EPOCH``) ``number`` into ``model_dir`` (with every rank's RNG states, gathered
        first, and the engine's entries: a sharded run's ranks write their shards first);
        then rank 0 broadcasts whether the write succeeded and every rank raises
        :class:`~asrkit.checkpoint.CheckpointError` if it did not."""
        rng_ranks = self.ctx.gather_to_main(capture_rng_state())
        name = checkpoint_filename(kind, number)
        path, error = None, None
        try:
            entries = self.engine.checkpoint_entries(self.executor.model, self.executor.optimizer,
                                                     self.model_dir / name)
        except CheckpointError as e:  # (a rank could not write its shards)
            error = e
        if self.ctx.is_main and error is None:
            sampler_state = self.train_loader.state_dict() if mid_epoch else None
            info = {"epoch": self.state.epoch if mid_epoch else self.state.epoch - 1,
                    "step": self.state.step, "cv_loss": cv_loss,
                    "mid_epoch": mid_epoch, "lr": self.executor.optimizer.param_groups[0]["lr"]}
            try:
                path = save_checkpoint(self.model_dir / name, self._full_state(sampler_state, rng_ranks, entries),
                                       info)
                prune_step_checkpoints(self.model_dir, self.cfg.keep_checkpoint_max)
                log.info("saved %s (epoch %d, step %d)", path, info["epoch"], self.state.step)
            except CheckpointError as e:
                error = e
        if not self.ctx.decide(error is None):
            raise error or CheckpointError(
                f"rank 0 could not write checkpoint {name} (its log says why); the previous checkpoints "
                f"are intact")
        return path

    def resume(self, path: str | Path) -> None:
        """Restore everything from a checkpoint written by :meth:`save`.

        A mid-epoch checkpoint resumes inside its epoch at the first batch not yet
        trained on; an epoch-end checkpoint resumes at the start of the next epoch.
        A WeNet checkpoint (its ``model.state_dict()``, WeNet's names) or a model-only asrkit
        checkpoint (weights and none of optimizer, scheduler, train state and RNG: an average,
        a converted Whisper file) starts a fine-tuning run instead: every weight is loaded, and
        optimizer, scheduler and epoch start fresh, as with WeNet's own ``--checkpoint``.  A
        checkpoint holding some of those four but not all is refused.

        A checkpoint whose recorded units file or BPE model digest
        (:data:`asrkit.config_files.INPUT_DIGESTS`) differs from this run's files is refused
        (:class:`~asrkit.checkpoint.CheckpointError`: the model was trained with other
        units); one without digests (saved before they were recorded) resumes as before.
        """
        ex = self.executor
        state = load_checkpoint(path, map_location=self.ctx.device)
        missing = [k for k in ("optimizer", "scheduler", "train_state", "rng") if k not in state]
        wenet = is_wenet_checkpoint(state, unwrap(ex.model))
        if wenet or len(missing) == 4:
            self.engine.load_model(ex.model, state, path)
            log.info("fine-tuning from %s %s: all of its weights loaded; optimizer, scheduler and epochs "
                     "start fresh", "WeNet checkpoint" if wenet else "model-only checkpoint", path)
            return
        if missing:
            raise CheckpointError(f"{path} is not a complete training checkpoint (no {', '.join(missing)}); "
                                  f"it cannot resume a run")
        try:
            check_input_digests(self.cfg, state.get(INPUT_DIGESTS), path)
        except (UnitsError, BpeModelError) as e:
            raise CheckpointError(str(e)) from None
        differs = adaptation_difference(state.get("config") or {}, self.config_dict)
        if differs:
            raise CheckpointError(f"{path} was trained with {differs}: a run resumes with the fine-tuning "
                                  f"set-up it started with (start a new run in another --model_dir, from "
                                  f"this checkpoint with --enc_init, to change it)")
        self.engine.restore(ex.model, ex.optimizer, state, path)  # (either engine's checkpoint, any world size)
        ex.scheduler.load_state_dict(state["scheduler"])
        if ex.scaler is not None and state.get("scaler"):
            ex.scaler.load_state_dict(state["scaler"])
        self.state = TrainState.from_dict(state["train_state"])
        self._resume_ema(state, path)
        if self.comm_hook is not None:  # (PowerSGD's memory is not in the checkpoint: comm_hooks says what it does)
            self.comm_hook.resumed_at(self.state.step)
        rng_ranks = state.get("rng_ranks") or [state["rng"]]
        if len(rng_ranks) == self.ctx.world_size:
            restore_rng_state(rng_ranks[self.ctx.rank])
        else:
            restore_rng_state(state["rng"])
            log.info("the checkpoint holds the RNG states of %d rank(s), this run has %d: every rank takes "
                     "rank 0's (dropout draws differ from an uninterrupted run's)", len(rng_ranks),
                     self.ctx.world_size)
        saved = state.get("world") or {"world_size": len(rng_ranks), "accum_grad": None}  # (older checkpoints)
        log_world_change(saved["world_size"], saved["accum_grad"], self.ctx.world_size, self.cfg.accum_grad)
        if state.get("sampler") is not None:
            self.train_loader.load_state_dict(state["sampler"])
            self.resumed_mid_epoch = True
        log.info("resumed from %s: epoch %d, step %d%s", path, self.state.epoch, self.state.step,
                 " (mid-epoch)" if self.resumed_mid_epoch else "")

    def _resume_ema(self, state: dict, path) -> None:
        """Restore the EMA shadow, or start it at the resumed weights when the checkpoint has none."""
        ema = self.executor.ema
        if ema is None:
            return
        if state.get("ema") is not None:
            ema.load_state_dict(state["ema"])
        else:
            ema.reset(unwrap(self.executor.model))
            log.info("%s holds no weight EMA: ema_decay %g starts its shadow at the resumed weights", path, ema.decay)

    # ------------------------------------------------------------------ loop

    def _train_epoch(self) -> tuple[Optional[str], int]:
        """Train the rest of the current epoch, with CV and checkpoints at their intervals.
        Returns why it stopped before the epoch's end (``"max_steps"`` or ``"preempted"``;
        None: it ran to its end) and this rank's utterances trained in applied steps."""
        trained = 0
        steps = self.executor.steps(self.train_loader, self.state, lambda: self.preemption.requested)
        with contextlib.closing(steps) as results:
            for result in results:
                trained += result.utterances
                self._write_scalars("train", result.scalars or {})
                stop = self._after_step(result)
                if stop:
                    return stop, trained
        return None, trained

    def _after_step(self, result: StepResult) -> Optional[str]:
        """After each optimizer step: CV / checkpoint at their intervals, a stop signal
        agreed in the step's all-reduce, ``max_steps``.  Returns why training stops here
        (``"preempted"``, ``"max_steps"``) or None to go on."""
        step = self.state.step
        stop = self.max_steps is not None and step >= self.max_steps
        preempt = result.stop_requests > 0
        stepped = step > 0  # (groups of skipped samples before the first step: nothing to check or save)
        cv_loss = None
        if self.cfg.cv_interval and stepped and step % self.cfg.cv_interval == 0 and not preempt:
            cv_loss = self.run_cv(f"step {step}")["loss"]
        if stop or preempt or (self.cfg.save_interval and stepped and step % self.cfg.save_interval == 0):
            self.save(STEP, step, mid_epoch=True, cv_loss=cv_loss)
        if preempt:
            self._log_preempted(result.stop_requests, f"after optimizer step {step}")
            return "preempted"
        if stop:
            log.info("reached max_steps=%d; stopping (resume with --checkpoint auto)", self.max_steps)
            return "max_steps"
        return None

    def _log_preempted(self, ranks_requesting: int, where: str) -> None:
        log.warning("preempted: %s; stopping %s with a checkpoint at step %d (epoch %d) -- rerun with "
                    "--checkpoint auto to continue from it", self.preemption.describe(ranks_requesting,
                                                                                      self.ctx.world_size),
                    where, self.state.step, self.state.epoch)

    def _write_scalars(self, board: str, scalars: dict[str, float]) -> None:
        """``scalars`` to TensorBoard (rank 0) as ``<board>/<name>`` at the current step."""
        if self.writer is not None:
            for k, v in scalars.items():
                self.writer.add_scalar(f"{board}/{k}", v, self.state.step)

    def run_cv(self, label: str) -> dict:
        """CV over every CV list, the result over all of them together (from their summed
        losses); with several lists each is also logged (and written to TensorBoard under
        ``cv/<list folder>/``) apart."""
        several = len(self.cv_parts) > 1
        totals = []
        for path, loader in self.cv_parts:
            loader.set_epoch(0)
            totals.append(self.executor.cv_sums(loader))
            if several:
                self._log_cv(f"{label} [{path}]", cv_means(totals[-1], self.executor.length_normalized),
                             f"cv/{Path(path).parent.name}")
        names = dict.fromkeys(k for sums, _, _ in totals for k in sums)
        result = cv_means(({k: sum(t[0].get(k, 0.0) for t in totals) for k in names},
                           sum(t[1] for t in totals), sum(t[2] for t in totals)), self.executor.length_normalized)
        self._log_cv(f"{label} (all CV lists)" if several else label, result, "cv")
        return result

    def _log_cv(self, label: str, result: dict, board: str) -> None:
        parts = [f"{k} {v:.4f}" for k, v in result.items() if k != "num_utts"]
        log.info("CV %s: %s (%d utterances)", label, " | ".join(parts), result["num_utts"])
        self._write_scalars(board, {k: v for k, v in result.items() if k != "num_utts"})

    def _report_data(self, epoch: int, trained_here: int, partial: bool) -> tuple[int, dict[str, int]]:
        """Per-reason counts of samples dropped as bad data this epoch (each rank logs its
        own), and on rank 0 the totals over all ranks: utterances trained (in applied
        optimizer steps; this rank's: ``trained_here``) and skipped per reason.  ``partial``: the epoch was resumed or
        stopped mid-way, so the totals cover only this process's part of it.  Returns the
        totals ``(trained, skipped per reason)``, the same on every rank."""
        stats = getattr(self.train_loader, "skip_stats", None)
        counts = dict(stats.counts) if stats is not None else {}
        if counts:
            log.warning("epoch %d: rank %d skipped bad samples: %s", epoch, self.ctx.rank, stats.summary())
        per_rank = self.ctx.all_gather({"trained": trained_here, "skipped": counts})
        trained = sum(r["trained"] for r in per_rank)
        skipped: dict[str, int] = {}
        for r in per_rank:
            for reason, n in r["skipped"].items():
                skipped[reason] = skipped.get(reason, 0) + n
        if self.ctx.is_main:
            log.info("epoch %d data%s: %d utterances trained, %d skipped as bad data (%s), over %d rank(s)",
                     epoch, " (part of the epoch run by this process)" if partial else "", trained,
                     sum(skipped.values()), _reasons(skipped), self.ctx.world_size)
        return trained, skipped

    def _check_some_data_used(self, epoch: int, trained: int, skipped: dict[str, int]) -> None:
        """Raise :class:`NoUsableDataError` when the finished epoch trained nothing because
        every sample it read was skipped as bad data.  An epoch that skipped none is not a
        data problem: a resumed epoch whose rest was empty, or one whose every step was an
        fp16 calibration skip (a short epoch while the GradScaler finds its scale) or a
        counted non-finite step (``max_nonfinite_steps`` governs those)."""
        if trained or not skipped:
            return
        raise NoUsableDataError(
            f"epoch {epoch}: no utterance could be used: {sum(skipped.values())} skipped ({_reasons(skipped)}) "
            f"over {self.ctx.world_size} rank(s); no checkpoint of this epoch was written -- fix the train list "
            f"or its audio (the log names each skipped key and why)")

    def _early_stop(self, cv_loss: float) -> bool:
        s = self.state
        if s.best_cv_loss is None or cv_loss < s.best_cv_loss:
            s.best_cv_loss, s.epochs_without_improvement = cv_loss, 0
        else:
            s.epochs_without_improvement += 1
        patience = self.cfg.early_stop_patience
        wants = bool(patience) and s.epochs_without_improvement >= patience
        return self.ctx.decide(wants)

    def fit(self) -> TrainState:
        """Train from the current state to ``max_epoch`` (or ``max_steps``/early stop), with
        TensorBoard open and the stop signals handled for the call.  A stop signal ends it at
        an optimizer-step boundary, after a checkpoint, with
        :class:`~asrkit.train.preemption.Preempted` (raised once the writer is closed)."""
        if self.ctx.is_main:
            from torch.utils.tensorboard import SummaryWriter  # (defers tensorboard: rank 0 only)
            self.writer = SummaryWriter(self.tensorboard_dir)
        # Installed only now: a signal during start-up still ends the process at once (there is
        # nothing to save yet); from here on it is acted on at the next optimizer step.
        self.preemption.install()
        try:
            preempted = self._epochs()
        finally:
            self.preemption.uninstall()
            if self.writer is not None:
                self.writer.close()
                self.writer = None
        if preempted:
            by = self.preemption.signal_name() if self.preemption.requested else "another rank's stop signal"
            raise Preempted(f"exiting with status {Preempted.exit_status} after {by} (step {self.state.step} saved)")
        log.info("training finished at epoch %d, step %d", self.state.epoch, self.state.step)
        return self.state

    def _epochs(self) -> bool:
        """The epochs from the current state on; True when a stop signal ended them."""
        while self.state.epoch < self.cfg.max_epoch:
            epoch = self.state.epoch
            if not self.resumed_mid_epoch:
                self.train_loader.set_epoch(epoch)
            self.resumed_mid_epoch = False
            log.info("epoch %d: %d batches per rank", epoch, len(self.train_loader))
            partial = consumed_position(self.train_loader) > 0
            stopped, trained_here = self._train_epoch()
            trained, skipped = self._report_data(epoch, trained_here, partial=partial or stopped is not None)
            if stopped is not None:
                return stopped == "preempted"
            self._check_some_data_used(epoch, trained, skipped)
            cv = self.run_cv(f"epoch {epoch}")
            stop = self._early_stop(cv["loss"])
            self.state.epoch = epoch + 1
            self.save(EPOCH, epoch, mid_epoch=False, cv_loss=cv["loss"])
            requests = self.preemption.count_requests(self.ctx)
            if requests and self.state.epoch < self.cfg.max_epoch and not stop:
                self._log_preempted(requests, f"after epoch {epoch} and its checkpoint")
                return True
            if stop:
                log.info("early stop: no CV improvement for %d epochs (best %.4f)",
                         self.state.epochs_without_improvement, self.state.best_cv_loss)
                break
        return False


def _reasons(skipped: dict[str, int]) -> str:
    """``"2 missing_file, 1 too_long"`` (``"none"`` when empty)."""
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items())) or "none"
