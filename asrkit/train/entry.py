"""``run(job)``: a whole training job, top to bottom -- validate, start the process group,
then for each stage (the warm start, the main run: ``asrkit.train.stages``) build, resume
(or start) and fit -- and its exit status (``asrkit.bin.train`` documents them).

Everything that can be checked is checked before the process group exists
(:func:`validate`): the config (unknown keys, types, unsupported values), the launch, the
data lists, the units/BPE/CMVN files (loaded once here and handed to the stages) and the
device/dtype/sync_batchnorm combination.  The configs are final once validated: ``dtype:
auto`` is resolved by :func:`load_final_config`, and nothing changes a config afterwards.

Every way a run ends other than finishing is a :class:`~asrkit.train.problems.TrainingExit`,
and :func:`run` returns its ``exit_status``: nothing else decides a status.  A refusal
before the process group is printed to stderr as one ``error:`` line (or one line per
problem); inside it, the message is logged (:func:`report`) before the logs are closed."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Iterator, NoReturn, Optional

import torch

from asrkit.config import TrainConfig, load_config
from asrkit.config_files import BAD_INPUT, load_model_inputs
from asrkit.schema import ConfigError
from asrkit.train import dist as D
from asrkit.train.dist.context import DistContext
from asrkit.train.dist.launch import LaunchSpec
from asrkit.train.dist.network import NetworkCheckError, check_socket_ifname, master_host
from asrkit.train.job import TrainJob
from asrkit.train.logs import close_logging
from asrkit.train.precision import resolve_auto_dtype
from asrkit.train.preemption import Preempted
from asrkit.train.preflight import preflight
from asrkit.train.problems import Failed, Refused, TrainingExit, exits_as
from asrkit.train.stages import ValidatedJob, build_stage, fit_stage, resume_stage, stages

log = logging.getLogger("asrkit.train")


def run(job: TrainJob) -> int:
    """Run ``job``; the exit status: 0 done, else the ``exit_status`` of the
    :class:`~asrkit.train.problems.TrainingExit` that ended it (1 failed, 2 refused, 4
    preempted; 3, a data loader that stalled, is the rank monitor's: it ends the process)."""
    try:
        checked = validate(job)
        torch.set_num_threads(job.num_threads or D.default_num_threads(checked.spec.local_world_size))
        with process_group(checked.spec, checked.cfg.launch.timeout_s) as ctx:
            for stage in stages(checked):
                trainer = build_stage(stage, ctx, checked.spec)
                resume_stage(trainer, stage.job, ctx)
                fit_stage(trainer, ctx)
    except TrainingExit as e:
        return e.exit_status
    return 0


def load_final_config(path: str | Path, overrides: list[str], device: str,
                      notes: Optional[list[str]] = None) -> TrainConfig:
    """The validated config of ``path`` with ``overrides`` (``asrkit.config.load_config``),
    final: ``dtype: auto`` becomes what :func:`asrkit.train.precision.resolve_auto_dtype`
    decides for ``device`` (its reason appended to ``notes``) by validating the config again
    with the override ``dtype=<that>`` after the others -- so what every rank checks,
    compares, logs and records in ``train.yaml`` and the checkpoints is a validated config."""
    cfg = load_config(path, overrides, notes=notes)
    if cfg.dtype != "auto":
        return cfg
    dtype, why = resolve_auto_dtype(torch.device(device))
    if notes is not None:
        notes.append(why)
    return load_config(path, [*overrides, f"dtype={dtype}"])


def validate(job: TrainJob) -> ValidatedJob:
    """``job`` checked before any heavy work: its configs (final), launch, files and
    settings.  :class:`~asrkit.train.problems.Refused` (printed on stderr first: no log is
    set up yet) for the first thing found wrong, or every preflight problem at once."""
    try:
        return _validate(job)
    except TrainingExit as e:
        print(f"error: {e}", file=sys.stderr)
        raise


def _validate(job: TrainJob) -> ValidatedJob:
    notes: list[str] = []
    warm = job.warm_start
    with exits_as(Refused, ConfigError, D.LaunchError, NetworkCheckError):
        cfg = load_final_config(job.config, list(job.overrides), job.device, notes)
        warm_cfg = load_final_config(job.config, [*job.overrides, *warm.overrides], job.device) if warm else None
        flags = job.launch
        spec = D.resolve_launch(cfg.launch, rank=flags.rank, world_size=flags.world_size,
                                local_rank=flags.local_rank, init_method=flags.init_method,
                                dist_backend=flags.dist_backend)
        if spec.world_size > 1:
            D.check_init_method(spec.init_method)
            check_socket_ifname(master_host(spec.init_method, os.environ), os.environ, backend=spec.backend)
    problems = preflight(cfg, job, spec.backend)
    if problems:  # one line for one problem
        sep = " " if len(problems) == 1 else "\n  "
        raise Refused("cannot start training:" + sep + sep.join(map(str, problems)))
    # units, special_tokens, BPE model, CMVN: read and checked before anything is built
    with exits_as(Refused, *BAD_INPUT):
        inputs = load_model_inputs(cfg, model_cmvn=True)
        warm_inputs = load_model_inputs(warm_cfg, model_cmvn=True) if warm_cfg is not None else None
    return ValidatedJob(job, spec, cfg, inputs, warm_cfg, warm_inputs, tuple(notes))


@contextlib.contextmanager
def process_group(spec: LaunchSpec, timeout_s: float) -> Iterator[DistContext]:
    """The process group of ``spec`` and this rank's monitor (``ctx.monitor``: the one way
    to it) around the body.  A :class:`~asrkit.train.problems.TrainingExit` from the body is
    reported (:func:`report`) while the logs are still open; a failed collective is reported
    and raised as a :class:`~asrkit.train.problems.Failed` naming what each rank was doing.
    Then the monitor publishes its last state (finished, preempted or failed), the group is
    torn down and the training's log handlers are closed."""
    ctx = D.init_distributed(spec, timeout_s=timeout_s)
    D.RankMonitor.for_context(ctx, timeout_s)
    state, collective_failed = "failed", False
    try:
        yield ctx
        state = "finished"
    except TrainingExit as e:
        state = "preempted" if isinstance(e, Preempted) else "failed"
        report(ctx, e)
        raise
    except Exception as e:
        if not (ctx.distributed and D.is_collective_failure(e)):
            raise
        collective_failed = True
        failure = Failed(ctx.monitor.explain(e))
        report(ctx, failure)
        raise failure from e
    finally:
        ctx.monitor.stop(state)
        # After a failed collective, an nccl group can hang in its destructor: leave it to the exit.
        if not (collective_failed and spec.backend == "nccl"):
            D.shutdown()
        close_logging()


def report(ctx: DistContext, e: TrainingExit) -> None:
    """Log why the run ends on this rank -- a warning for a preemption, else an error (rank
    0's log goes to stderr) -- and print an error on stderr from the other ranks too (with
    ``e.once_per_node``, from the first rank of each other node only)."""
    if isinstance(e, Preempted):
        log.warning("%s", e)
        return
    log.error("%s", e)
    if not ctx.is_main and (ctx.local_rank == 0 or not e.once_per_node):
        print(f"[rank {ctx.rank}] error: {e}", file=sys.stderr, flush=True)


def exit_process(code: int):
    """End this training process with exit status ``code`` without the interpreter's
    finalization, after flushing logs and stdio and ending child processes.

    Why: gloo's worker threads can still hold work objects with tensors when the
    interpreter tears down; destroying them then takes the GIL of a dying interpreter and
    the process aborts with "terminate called without an active exception" (SIGABRT) --
    after the run finished and saved, yet torchrun then fails the whole job (seen in loaded
    CI runs; pytorch PR #179291 describes the mechanism).  Everything is saved and closed by
    the time :func:`run` returns (checkpoints are written atomically, the TensorBoard writer
    is closed), so nothing is left for finalization to do.  For ``__main__`` only: it never
    returns."""
    end_children()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def end_children() -> None:
    """Kill this process's ``multiprocessing`` children -- data-loader workers, normally gone
    already -- and reap them.  SIGKILL, not SIGTERM: the workers ignore SIGTERM
    (``asrkit.data.dataset.init_worker``), so the interpreter's own exit hook, which sends
    SIGTERM and then waits without a limit, would wait forever."""
    import multiprocessing
    for child in multiprocessing.active_children():
        child.kill()
        child.join(timeout=5)


def status_of(main: Callable[[], int]) -> int:
    """``main()``'s exit status, also when it raises: 130 for ``KeyboardInterrupt`` (a second
    Ctrl-C: ``asrkit.train.preemption``), and 1 for any other exception, its traceback printed
    first -- an internal error, since every way a run ends by design is a
    :class:`~asrkit.train.problems.TrainingExit` that :func:`run` turns into a status.  So the
    process still ends through :func:`exit_process`, never through the interpreter's
    finalization (which would wait for the data-loader workers forever).  ``SystemExit``
    passes through: argparse's, raised before anything starts (``--help``, a bad option), and
    what runs ``__main__`` in a process of its own (``runpy``) expects it."""
    try:
        return main()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BaseException:  # (an internal error: its traceback is what a bug report needs)
        import traceback
        print("error: internal error (a bug in asrkit) -- traceback:", file=sys.stderr)
        traceback.print_exc()
        return 1


def end_with(main: Callable[[], int]) -> NoReturn:
    """For ``__main__``: ``exit_process(status_of(main))``."""
    exit_process(status_of(main))
