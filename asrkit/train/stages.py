"""The stages of a training run and the three steps of each, inside the process group
``asrkit.train.run`` sets up: :func:`stages` lists them -- the warm start (the curriculum's
first stage), then the main run -- and each is built (:func:`build_stage`), resumed or
started (:func:`resume_stage`) and fitted (:func:`fit_stage`).

A part's error that ends the run becomes a :class:`~asrkit.train.problems.TrainingExit`
here, where its meaning is known: a checkpoint that cannot be loaded is ``cannot resume:
...`` (refused, status 2) before training and ``training stopped: ...`` (failed, status 1)
when it cannot be written during it."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Iterator, Optional

import torch

from asrkit.checkpoint.load import CheckpointError, find_resume_checkpoint
from asrkit.checkpoint.record import read_info
from asrkit.checkpoint.save import remove_stale_temporaries
from asrkit.checkpoint.names import STEP, checkpoint_filename
from asrkit.config import TrainConfig, dump_config, to_dict
from asrkit.data.lists import ListError
from asrkit.data.mixing import ListSpecError
from asrkit.config_files import ModelInputs
from asrkit.train import agreement
from asrkit.train.agreement import AgreementError
from asrkit.train.build import InitError, build_training
from asrkit.train.dist import describe
from asrkit.train.dist.context import DistContext
from asrkit.train.dist.launch import LaunchSpec
from asrkit.train.executor import NonFiniteError
from asrkit.train.job import ModuleInit, TrainJob
from asrkit.train.logs import setup_logging
from asrkit.train.problems import Failed, Refused, exits_as
from asrkit.train.trainer import NoUsableDataError, Trainer

log = logging.getLogger("asrkit.train")


@dataclasses.dataclass(frozen=True)
class ValidatedJob:
    """A job as validation (``asrkit.train.entry.validate``) leaves it: the launch resolved
    and checked, the configs final (``dtype: auto`` resolved), the units/BPE/CMVN files
    loaded -- ``warm_cfg``/``warm_inputs`` those of the warm start (with its overrides), when
    the job has one -- and the notes to log about the config."""

    job: TrainJob
    spec: LaunchSpec
    cfg: TrainConfig
    inputs: ModelInputs
    warm_cfg: Optional[TrainConfig] = None
    warm_inputs: Optional[ModelInputs] = None
    notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a run: ``job`` trained with ``cfg`` and its loaded units/BPE/CMVN files
    ``inputs`` into ``job.model_dir``; ``notes`` are logged when it starts."""

    job: TrainJob
    cfg: TrainConfig
    inputs: ModelInputs
    notes: tuple[str, ...] = ()


def stages(checked: ValidatedJob) -> Iterator[Stage]:
    """The stages of ``checked.job``, each trained before the next is asked for.

    Without a warm start, the main run alone.  With one, when the run starts fresh (no
    ``--checkpoint``, or ``auto`` finding none in ``model_dir``): first the warm start --
    ``warm_start.steps`` optimizer steps on ``warm_start.data`` into ``<model_dir>/warm_start``
    with ``checked.warm_cfg`` (an interrupted one resumes there; a finished one, holding
    ``step_<steps>.pt``, is not trained again) -- then the main run, its modules
    ``warm_start.prefixes`` started from the warm start's newest checkpoint (none:
    :class:`Failed`).  A run that resumes has no warm start: its own weights went past it.
    Every rank takes the same branch (``model_dir`` is shared, as for resuming; the ranks'
    agreement checks catch it otherwise)."""
    job, warm = checked.job, checked.job.warm_start
    main = Stage(job, checked.cfg, checked.inputs, checked.notes)
    if warm is None:
        yield main
        return
    if job.resumes_explicitly() or (job.checkpoint == "auto" and
                                    find_resume_checkpoint(job.model_dir) is not None):
        yield dataclasses.replace(main, notes=(*checked.notes, f"warm start: the run resumes from its own "
                                               f"checkpoint; {warm.data} is not trained on again"))
        return
    warm_dir = job.model_dir / "warm_start"
    if not (warm_dir / checkpoint_filename(STEP, warm.steps)).is_file():
        yield Stage(dataclasses.replace(job, train_data=warm.data, checkpoint="auto", max_steps=warm.steps,
                                        warm_start=None, model_dir=warm_dir, index_cache_dir=job.cache_dir,
                                        tensorboard_dir=job.tensorboard_dir and f"{job.tensorboard_dir}/warm_start"),
                    checked.warm_cfg, checked.warm_inputs, checked.notes)
    start = find_resume_checkpoint(warm_dir)
    if start is None:
        raise Failed(f"warm start: no usable checkpoint in {warm_dir}")
    yield dataclasses.replace(main, job=dataclasses.replace(job, init=ModuleInit(str(start), warm.prefixes)))


def init_flags(init: Optional[ModuleInit]) -> dict:
    """``--enc_init``/``--enc_init_mods`` for the ranks' agreement check (only when given)."""
    if not init:
        return {}
    return {"--enc_init": Path(init.checkpoint).name, "--enc_init_mods": init.prefixes}


def build_stage(stage: Stage, ctx: DistContext, spec: LaunchSpec) -> Trainer:
    """Start ``stage``'s logs in its ``model_dir``, have the ranks agree on the job (config,
    files, options), build its parts and return the :class:`Trainer` over them; rank 0
    writes the config as run to ``train.yaml``.  :class:`Refused`: a malformed
    ``--train_data`` item or list line, a list without entries, ranks that disagree,
    ``init`` not applicable."""
    job, cfg = stage.job, stage.cfg
    job.model_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(job.model_dir, ctx.rank)
    log.info(describe(ctx, spec))
    for note in stage.notes:
        log.info("config: %s", note)
    # WeNet shard lists (plain tar paths) are indexed here, before the ranks compare the
    # indexes; the cache goes next to the list, else into the experiment folder.
    ctx.monitor.set_phase("indexing WeNet shard lists (scanning the tars not cached yet)", "other")
    with exits_as(Refused, ListSpecError):  # (preflight refused it already; a caller without preflight)
        mix = job.train_mix
    files = {**agreement.job_files(to_dict(cfg), mix.paths, job.cv_lists),
             **agreement.shard_indexes(mix.paths, job.cv_lists, job.cache_dir)}
    ctx.monitor.set_phase("checking that the ranks agree (all-gathering config and file hashes)", "collective")
    with exits_as(Refused, AgreementError, once_per_node=True):
        agreement.check_agreement(ctx, to_dict(cfg), files,
                                  extra={"--max_steps": job.max_steps, **init_flags(job.init),
                                         "--train_data weights": mix.weights,
                                         "torch version": torch.__version__,
                                         "asrkit source": agreement.package_digest()})
    ctx.monitor.set_phase("building the tokenizer, loaders and model", "other")
    with exits_as(Refused, InitError, ListError):  # (a malformed list line: every rank read the same bytes)
        parts = build_training(cfg, ctx, train_data=mix, cv_data=job.cv_lists, cache_dir=job.cache_dir,
                               inputs=stage.inputs, init=job.init)
    if ctx.is_main:
        # Only rank 0 writes into model_dir, so only it removes the temporaries a writer that
        # died mid-write left there -- before it writes anything itself (another rank doing it
        # could delete rank 0's file in the middle of its write).
        remove_stale_temporaries(job.model_dir)
        dump_config(parts.cfg, job.model_dir / "train.yaml")
    # The run steps with the scaled accum_grad (parts.train_cfg); train.yaml and checkpoints keep
    # the config as written (with reference_world_size/keep_global_batch), so it rescales on any
    # world size.
    return Trainer(parts, ctx, job.model_dir, tensorboard_dir=job.tensorboard_dir, max_steps=job.max_steps)


def describe_start(job: TrainJob, seed: int) -> str:
    """The log line of a run that starts (does not resume): initialised vs resumed, said plainly."""
    common = "step 0, epoch 0, a fresh optimizer and learning-rate schedule"
    if job.init:
        return (f"a new run, initialised from {job.init.checkpoint} ({job.init.prefixes}; the rest from seed "
                f"{seed}): {common} -- a run resumes only its own checkpoints (--checkpoint)")
    return f"a new run from freshly initialised weights (seed {seed}): {common}"


def _resume_point(job: TrainJob, ctx: DistContext) -> Optional[str]:
    """The checkpoint this stage resumes from (None: fresh), after the ranks agreed on it."""
    resume = job.checkpoint
    if resume == "auto":
        resume = find_resume_checkpoint(job.model_dir)
        if resume is None:
            log.info("--checkpoint auto: no checkpoint in %s, starting fresh", job.model_dir)
    info = read_info(resume) if resume else None
    ctx.monitor.set_phase("checking that the ranks resume from the same checkpoint", "collective")
    with exits_as(Refused, AgreementError, once_per_node=True):
        agreement.agree_on(ctx, "the checkpoint to resume from",
                           {"checkpoint": Path(resume).name if resume else None,
                            "step": (info or {}).get("step"), "epoch": (info or {}).get("epoch")},
                           hint="every rank must resume from the same checkpoint: with --checkpoint auto on several "
                                "nodes, model_dir must be on a shared filesystem (or copy the checkpoint to each node)")
    return resume


def resume_stage(trainer: Trainer, job: TrainJob, ctx: DistContext) -> None:
    """Resume ``trainer`` from ``job.checkpoint`` (``auto``: the newest valid one in
    ``job.model_dir``, if any), once the ranks agree on it, or log how the stage starts.
    :class:`Refused`: ranks that disagree, a checkpoint that cannot resume the run."""
    resume = _resume_point(job, ctx)
    if resume:
        with exits_as(Refused, CheckpointError, prefix="cannot resume: "):
            trainer.resume(resume)
        if job.init:
            log.info("--enc_init %s was not applied: the run continues from its own checkpoint, which holds "
                     "its weights, optimizer and schedule", job.init.checkpoint)
    else:
        log.info(describe_start(job, trainer.cfg.seed))


def fit_stage(trainer: Trainer, ctx: DistContext) -> None:
    """``trainer.fit()``: :class:`Failed` when a checkpoint cannot be written or too many
    steps are not finite, :class:`Refused` for an epoch of which no sample could be used,
    ``asrkit.train.preemption.Preempted`` on a stop signal (after its checkpoint)."""
    ctx.monitor.set_phase("starting the training loop", "other")
    with exits_as(Failed, CheckpointError, NonFiniteError, prefix="training stopped: "), \
            exits_as(Refused, NoUsableDataError, prefix="training stopped: "):  # (every rank, the same epoch end)
        trainer.fit()
