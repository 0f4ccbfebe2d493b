"""``run(job)``: a whole training job -- config, launch, preflight, the process group, the
warm start and the main phase -- with the training's exit statuses (``asrkit.bin.train``
documents them).

Everything that can be checked is checked before the model is built: the config
(unknown keys, types, unsupported values), the data lists, the units/BPE/CMVN files and
the device/dtype/sync_batchnorm combination; the units/BPE/CMVN files are loaded once here
and handed to the phases.  Problems found before training are printed to stderr as one
``error:`` line (or one line per problem) with exit status 2."""
from __future__ import annotations

import logging
import os
import sys

import torch

from asrkit.config import ConfigError, TrainConfig, load_config
from asrkit.inputs import BAD_INPUT, ModelInputs, load_model_inputs
from asrkit.train import dist as D
from asrkit.train.agreement import AgreementError
from asrkit.train.checkpoint import CheckpointError
from asrkit.train.dist.network import NetworkCheckError, check_socket_ifname, master_host
from asrkit.train.executor import NonFiniteError
from asrkit.train.job import TrainJob
from asrkit.train.logs import close_logging
from asrkit.train.phase import fatal, train_phase, warm_start
from asrkit.train.preflight import preflight
from asrkit.train.precision import resolve_auto_dtype
from asrkit.train.trainer import NoUsableDataError

log = logging.getLogger("asrkit.train")


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
    import multiprocessing
    for child in multiprocessing.active_children():  # (data-loader workers, normally gone already)
        child.terminate()
        child.join(timeout=5)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def run(job: TrainJob) -> int:
    """Run ``job``; the exit status (0 done, 1 failed, 2 refused, 3 data loader timeout,
    4 preempted: see ``asrkit.bin.train``)."""
    notes: list[str] = []
    warm = job.warm_start
    try:
        cfg = load_config(job.config, list(job.overrides), notes=notes)
        warm_cfg = load_config(job.config, [*job.overrides, *warm.overrides]) if warm else None
        flags = job.launch
        spec = D.resolve_launch(cfg.launch, rank=flags.rank, world_size=flags.world_size,
                                local_rank=flags.local_rank, init_method=flags.init_method,
                                dist_backend=flags.dist_backend)
        if spec.world_size > 1:
            D.check_init_method(spec.init_method)
            check_socket_ifname(master_host(spec.init_method, os.environ), os.environ, backend=spec.backend)
    except (ConfigError, D.LaunchError, NetworkCheckError) as e:
        return _error(str(e))
    if cfg.dtype == "auto":  # decided before anything reads it; the ranks' agreement check compares the result
        cfg.dtype, why = resolve_auto_dtype(torch.device(job.device))
        notes.append(why)
    if warm_cfg is not None and warm_cfg.dtype == "auto":
        warm_cfg.dtype = resolve_auto_dtype(torch.device(job.device))[0]
    problems = preflight(cfg, job, spec.backend)
    if problems:  # one line for one problem
        sep = " " if len(problems) == 1 else "\n  "
        print("error: cannot start training:" + sep + sep.join(map(str, problems)), file=sys.stderr)
        return 2
    try:  # units, special_tokens, BPE model, CMVN: read and checked before anything is built
        inputs = load_model_inputs(cfg, model_cmvn=True)
        warm_inputs = load_model_inputs(warm_cfg, model_cmvn=True) if warm_cfg is not None else None
    except BAD_INPUT as e:
        return _error(str(e))
    torch.set_num_threads(job.num_threads or D.default_num_threads(spec.local_world_size))
    return _in_process_group(job, spec, cfg, inputs, warm_cfg, warm_inputs, notes)


def _in_process_group(job: TrainJob, spec, cfg: TrainConfig, inputs: ModelInputs, warm_cfg, warm_inputs,
                      notes: list[str]) -> int:
    """The phases inside the process group, with the failures that end them mapped to exit
    statuses; the group is torn down afterwards."""
    ctx = D.init_distributed(spec, timeout_s=cfg.launch.timeout_s)
    monitor = D.RankMonitor.for_context(ctx, cfg.launch.timeout_s)
    code, collective_failed = 1, False
    try:
        if job.warm_start:
            code, job = warm_start(warm_cfg, warm_inputs, job, ctx, spec, notes)
            if code != 0:
                return code
        code = train_phase(cfg, inputs, job, ctx, spec, notes)
        return code
    except AgreementError as e:
        code = 2
        fatal(ctx, str(e), to_stderr=ctx.local_rank == 0)
        return code
    except NoUsableDataError as e:  # (every rank raises it at the same epoch end)
        code = 2
        fatal(ctx, f"training stopped: {e}", to_stderr=True)
        return code
    except (CheckpointError, NonFiniteError) as e:
        fatal(ctx, f"training stopped: {e}", to_stderr=True)
        return code
    except Exception as e:
        if not (ctx.distributed and D.is_collective_failure(e)):
            raise
        collective_failed = True
        fatal(ctx, monitor.explain(e), to_stderr=True)
        return code
    finally:
        monitor.stop({0: "finished", 4: "preempted"}.get(code, "failed"))
        # After a failed collective, an nccl group can hang in its destructor: leave it to the exit.
        if not (collective_failed and spec.backend == "nccl"):
            D.shutdown()
        close_logging()
