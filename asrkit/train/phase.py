"""One training phase, once the process group exists: the ranks agree on the job, the parts
are built, the run resumes or starts, and the trainer runs to its end -- and the warm start,
the curriculum's first phase before the main one (``asrkit.train.run`` calls both)."""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Optional

import torch

from asrkit.config import TrainConfig, dump_config, to_dict
from asrkit.data.lists import ListError
from asrkit.data.mixing import ListSpecError
from asrkit.inputs import ModelInputs
from asrkit.io.checkpoint_names import STEP, checkpoint_filename
from asrkit.train import agreement
from asrkit.train import checkpoint as ckpt
from asrkit.train.build import InitError, build_training
from asrkit.train.dist import RankMonitor, describe
from asrkit.train.dist.context import DistContext
from asrkit.train.job import ModuleInit, TrainJob
from asrkit.train.logs import setup_logging
from asrkit.train.preemption import EXIT_PREEMPTED, Preemption
from asrkit.train.trainer import Trainer

log = logging.getLogger("asrkit.train")


def fatal(ctx: DistContext, msg: str, to_stderr: bool) -> None:
    """Log ``msg`` as an error (rank 0's log also goes to stderr); other ranks print it too
    when ``to_stderr``."""
    log.error("%s", msg)
    if to_stderr and not ctx.is_main:
        print(f"[rank {ctx.rank}] error: {msg}", file=sys.stderr, flush=True)


def init_flags(init: Optional[ModuleInit]) -> dict:
    """``--enc_init``/``--enc_init_mods`` for the ranks' agreement check (only when given)."""
    if not init:
        return {}
    return {"--enc_init": Path(init.checkpoint).name, "--enc_init_mods": init.prefixes}


def warm_start(cfg: TrainConfig, inputs: ModelInputs, job: TrainJob, ctx: DistContext, spec,
               notes: list[str]) -> tuple[int, TrainJob]:
    """The curriculum's first phase, when the main run starts fresh (no checkpoint, or
    ``auto`` finding none in ``job.model_dir``): train ``job.warm_start.steps`` optimizer
    steps on ``job.warm_start.data`` into ``<model_dir>/warm_start`` (same launch; ``cfg`` is
    the config with the warm start's overrides applied last; an interrupted phase resumes
    there).  Returns the phase's exit status and the main run's job: ``job`` with ``init``
    pointing at the phase's newest checkpoint and the warm start's prefixes (status 0: go on
    with it).  A run that resumes skips the phase: its own weights already went past it.
    Every rank takes the same branch (model_dir is shared, as for resuming; the ranks'
    agreement checks catch it otherwise)."""
    warm = job.warm_start
    resumes = job.resumes_explicitly() or (
        job.checkpoint == "auto" and ckpt.find_resume_checkpoint(job.model_dir) is not None)
    if resumes:
        notes.append(f"warm start: the run resumes from its own checkpoint; {warm.data} is not trained on again")
        return 0, job
    warm_dir = job.model_dir / "warm_start"
    if not (warm_dir / checkpoint_filename(STEP, warm.steps)).is_file():
        phase = dataclasses.replace(
            job, train_data=warm.data, checkpoint="auto", max_steps=warm.steps, warm_start=None,
            model_dir=warm_dir, index_cache_dir=job.cache_dir,
            tensorboard_dir=job.tensorboard_dir and f"{job.tensorboard_dir}/warm_start")
        code = train_phase(cfg, inputs, phase, ctx, spec, notes)
        if code != 0:
            return code, job
    start = ckpt.find_resume_checkpoint(warm_dir)
    if start is None:
        log.error("warm start: no usable checkpoint in %s", warm_dir)
        return 1, job
    return 0, dataclasses.replace(job, init=ModuleInit(str(start), warm.prefixes))


def train_phase(cfg: TrainConfig, inputs: ModelInputs, job: TrainJob, ctx: DistContext, spec,
                notes: list[str]) -> int:
    """Train ``job`` into ``job.model_dir`` (``asrkit.train.run`` owns the process group and
    tears it down afterwards).  Returns the exit status: 0 done, 2 refused (a malformed list
    line or a list without entries, ``init`` not applicable, a checkpoint that cannot resume the
    run), 4 preempted; an epoch that could use no sample raises
    ``asrkit.train.trainer.NoUsableDataError``."""
    model_dir = job.model_dir
    model_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(model_dir, ctx.rank)
    log.info(describe(ctx, spec))
    for note in notes:
        log.info("config: %s", note)
    monitor = ctx.monitor or RankMonitor(ctx, cfg.launch.timeout_s)  # (not started: phases only)

    # WeNet shard lists (plain tar paths) are indexed here, before the ranks compare the
    # indexes; the cache goes next to the list, else into the experiment folder.
    monitor.set_phase("indexing WeNet shard lists (scanning the tars not cached yet)", "other")
    try:
        mix = job.train_mix
    except ListSpecError as e:  # (preflight refused it already; a caller without preflight)
        fatal(ctx, str(e), to_stderr=True)
        return 2
    files = {**agreement.job_files(to_dict(cfg), mix.paths, job.cv_lists),
             **agreement.shard_indexes(mix.paths, job.cv_lists, job.cache_dir)}
    monitor.set_phase("checking that the ranks agree (all-gathering config and file hashes)", "collective")
    agreement.check_agreement(ctx, to_dict(cfg), files,
                              extra={"--max_steps": job.max_steps, **init_flags(job.init),
                                     "--train_data weights": mix.weights,
                                     "torch version": torch.__version__,
                                     "asrkit source": agreement.package_digest()})
    monitor.set_phase("building the tokenizer, loaders and model", "other")
    try:
        parts = build_training(cfg, ctx, train_data=mix, cv_data=job.cv_lists, cache_dir=job.cache_dir,
                               inputs=inputs, init=job.init, monitor=monitor)
    except (InitError, ListError) as e:  # (a malformed list line: every rank read the same bytes)
        fatal(ctx, str(e), to_stderr=True)
        return 2
    if ctx.is_main:
        # Only rank 0 writes into model_dir, so only it removes the temporaries a writer that
        # died mid-write left there -- before it writes anything itself (another rank doing it
        # could delete rank 0's file in the middle of its write).
        ckpt.remove_stale_temporaries(model_dir)
        dump_config(parts.cfg, model_dir / "train.yaml")
    return _fit(parts, job, ctx, monitor)


def describe_start(job: TrainJob, seed: int) -> str:
    """The log line of a run that starts (does not resume): initialised vs resumed, said plainly."""
    common = "step 0, epoch 0, a fresh optimizer and learning-rate schedule"
    if job.init:
        return (f"a new run, initialised from {job.init.checkpoint} ({job.init.prefixes}; the rest from seed "
                f"{seed}): {common} -- a run resumes only its own checkpoints (--checkpoint)")
    return f"a new run from freshly initialised weights (seed {seed}): {common}"


def _resume_point(job: TrainJob, ctx: DistContext, monitor) -> Optional[str]:
    """The checkpoint this phase resumes from (None: fresh), after the ranks agreed on it."""
    resume = job.checkpoint
    if resume == "auto":
        resume = ckpt.find_resume_checkpoint(job.model_dir)
        if resume is None:
            log.info("--checkpoint auto: no checkpoint in %s, starting fresh", job.model_dir)
    info = ckpt.read_info(resume) if resume else None
    monitor.set_phase("checking that the ranks resume from the same checkpoint", "collective")
    agreement.agree_on(ctx, "the checkpoint to resume from",
                       {"checkpoint": Path(resume).name if resume else None,
                        "step": (info or {}).get("step"), "epoch": (info or {}).get("epoch")},
                       hint="every rank must resume from the same checkpoint: with --checkpoint auto on several "
                            "nodes, model_dir must be on a shared filesystem (or copy the checkpoint to each node)")
    return resume


def _fit(parts, job: TrainJob, ctx: DistContext, monitor) -> int:
    """Resume (or start) and run the trainer; the exit status."""
    writer = None
    if ctx.is_main:
        from torch.utils.tensorboard import SummaryWriter  # (defers tensorboard: rank 0 only)
        writer = SummaryWriter(job.tensorboard_dir or str(job.model_dir / "tensorboard"))
    preemption = Preemption()
    # The run steps with the scaled accum_grad (parts.train_cfg); train.yaml and checkpoints keep
    # the config as written (with reference_world_size/keep_global_batch), so it rescales on any
    # world size.
    trainer = Trainer(parts, ctx, job.model_dir, writer=writer, max_steps=job.max_steps, preemption=preemption)
    resume = _resume_point(job, ctx, monitor)
    if resume:
        try:
            trainer.resume(resume)
        except ckpt.CheckpointError as e:
            fatal(ctx, f"cannot resume: {e}", to_stderr=True)
            return 2
        if job.init:
            log.info("--enc_init %s was not applied: the run continues from its own checkpoint, which holds "
                     "its weights, optimizer and schedule", job.init.checkpoint)
    else:
        log.info(describe_start(job, trainer.cfg.seed))
    monitor.set_phase("starting the training loop", "other")
    # Installed only now: a signal during start-up still ends the process at once (there is
    # nothing to save yet); from here on it is acted on at the next optimizer step.
    preemption.install()
    try:
        state = trainer.fit()
    finally:
        preemption.uninstall()
        if writer is not None:
            writer.close()
    if trainer.preempted:
        log.warning("exiting with status %d after %s (step %d saved)", EXIT_PREEMPTED,
                    preemption.signal_name() if preemption.requested else "another rank's stop signal", state.step)
        return EXIT_PREEMPTED
    log.info("training finished at epoch %d, step %d", state.epoch, state.step)
    return 0
