"""Train a model from a YAML config.

    python -m asrkit.bin.train --config conf/train.yaml --train_data data/train/data.list \\
        --cv_data data/dev/data.list --model_dir exp/conformer [--checkpoint auto|PATH] \\
        [--override optim_conf.lr=0.001 ...]

Everything that can be checked is checked before the model is built: the config
(unknown keys, types, unsupported values), the data lists, the units/BPE/CMVN files and
the device/dtype/sync_batchnorm combination.  With several ranks, they then agree on
hashes of the config (less ``launch``), those files and the data lists
(``asrkit.train.agreement``) before any heavy work.  The resolved config is written to
``<model_dir>/train.yaml``.

Exit status: 0 done; 2 refused before training (config, files, device, a
``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` that cannot reach the master, ranks disagreeing,
a malformed data list line, a ``--checkpoint`` that does not load); 1 failed (a collective
timed out: the message names the ranks and what they were doing; a checkpoint could not
be written; too many non-finite steps); 3 this rank waited longer than
``launch.timeout_s`` for its data loader; 4 stopped by SIGTERM/SIGINT after saving a
checkpoint at an optimizer-step boundary (``asrkit.train.preemption``): rerun with
``--checkpoint auto`` to continue.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import torch

from asrkit.config import ConfigError, TrainConfig, dump_config, load_config, to_dict
from asrkit.train.agreement import AgreementError
from asrkit.train.checkpoint import CheckpointError
from asrkit.train.dist.network import NetworkCheckError, check_socket_ifname, master_host
from asrkit.train.executor import NonFiniteError

log = logging.getLogger("asrkit.train")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="training config (YAML)")
    p.add_argument("--train_data", required=True, help="train data.list (raw or shard list)")
    p.add_argument("--cv_data", required=True, help="CV data.list (raw or shard list)")
    p.add_argument("--model_dir", required=True, help="experiment directory")
    p.add_argument("--checkpoint", default=None,
                   help="'auto': resume from the newest valid checkpoint in model_dir (start fresh if "
                        "none); a path: resume from that checkpoint")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value (repeatable), e.g. optim_conf.lr=0.001")
    p.add_argument("--num_threads", type=int, default=0,
                   help="intra-op threads per process (0: this node's cores / processes per node)")
    p.add_argument("--max_steps", type=int, default=None,
                   help="stop after this many optimizer steps in total, saving a checkpoint")
    p.add_argument("--tensorboard_dir", default=None, help="default: <model_dir>/tensorboard")
    p.add_argument("--enc_init", default=None, metavar="CHECKPOINT",
                   help="start from the modules --enc_init_mods of this checkpoint or averaged model (e.g. "
                        "the encoder of a char model); the rest is freshly initialised. A resumed run "
                        "(--checkpoint) restores its own weights instead")
    p.add_argument("--enc_init_mods", default="encoder.",
                   help="comma-separated parameter-name prefixes taken from --enc_init (default: encoder.)")
    warm = p.add_argument_group(
        "warm start (a curriculum: first train on an easier list, e.g. one clean voice, then on "
        "--train_data from that model)")
    warm.add_argument("--warm_start_data", default=None, metavar="LIST",
                      help="when the run starts fresh, first train on this list in <model_dir>/warm_start")
    warm.add_argument("--warm_start_steps", type=int, default=0,
                      help="optimizer steps of the warm start (required with --warm_start_data)")
    warm.add_argument("--warm_start_override", action="append", default=[], metavar="KEY.PATH=VALUE",
                      help="config overrides for the warm start only, after --override "
                           "(e.g. scheduler_conf.warmup_steps=250)")
    warm.add_argument("--warm_start_mods", default="encoder.,decoder.,ctc.",
                      help="parameter-name prefixes the main run takes from the warm start's model "
                           "(default: encoder.,decoder.,ctc.)")
    legacy = p.add_argument_group(
        "legacy launch (one process per GPU started by a shell loop); ignored under torchrun, whose "
        "environment takes precedence; these flags take precedence over the config's launch section")
    legacy.add_argument("--rank", type=int, default=None, help="global rank of this process")
    legacy.add_argument("--world_size", type=int, default=None, help="number of processes in the job")
    legacy.add_argument("--local_rank", type=int, default=None, help="GPU index on this node (default: rank)")
    legacy.add_argument("--init_method", default=None, help="tcp://host:port, env:// or file:///path")
    legacy.add_argument("--dist_backend", default=None, choices=["auto", "gloo", "nccl"])
    return p


def setup_logging(model_dir: Path, rank: int) -> None:
    (model_dir / "log").mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter(f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    close_logging()  # (a warm start's handlers, when the main run follows it)
    file_handler = logging.FileHandler(model_dir / "log" / f"rank{rank}.log", encoding="utf-8")
    file_handler.setFormatter(fmt)
    handlers = [file_handler]
    if rank == 0:
        handlers.append(logging.StreamHandler(sys.stderr))
        handlers[-1].setFormatter(fmt)
    for h in handlers:
        h._asrkit_train = True  # (close_logging removes these and only these)
        root.addHandler(h)


def close_logging() -> None:
    """Flush and remove the handlers ``setup_logging`` installed (main may run in a process
    that goes on: a test, a notebook)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_asrkit_train", False):
            root.removeHandler(h)
            h.close()


def preflight(cfg: TrainConfig, args, device: torch.device, backend: str | None = None) -> list[str]:
    """Problems found before any heavy work (files, device/dtype, sync_batchnorm, world-size scaling)."""
    problems = []
    for flag in ("train_data", "cv_data"):
        if not Path(getattr(args, flag)).is_file():
            problems.append(f"--{flag} {getattr(args, flag)}: file not found")
    units = cfg.tokenizer_conf.symbol_table_path
    if not units:
        problems.append("tokenizer_conf.symbol_table_path is not set (the units.txt of tools/make_units.py)")
    elif not Path(units).is_file():
        problems.append(f"tokenizer_conf.symbol_table_path {units}: file not found")
    if cfg.tokenizer == "bpe" and cfg.tokenizer_conf.bpe_path and not Path(cfg.tokenizer_conf.bpe_path).is_file():
        problems.append(f"tokenizer_conf.bpe_path {cfg.tokenizer_conf.bpe_path}: file not found")
    syms = cfg.tokenizer_conf.non_lang_syms_path
    if syms is not None and not Path(syms).is_file():
        problems.append(f"tokenizer_conf.non_lang_syms_path {syms}: file not found")
    cmvn_file = cfg.cmvn_conf.cmvn_file if cfg.cmvn else None
    if cmvn_file and not Path(cmvn_file).is_file():
        problems.append(f"cmvn_conf.cmvn_file {cmvn_file}: file not found")
    if cfg.dtype != "fp32" and device.type != "cuda":
        problems.append(f"dtype: {cfg.dtype} needs a CUDA device (mixed precision is for GPUs; on this CPU "
                        f"bf16 is many times slower than fp32) -- use dtype: fp32")
    elif cfg.dtype == "bf16" and not torch.cuda.is_bf16_supported():
        problems.append("dtype: bf16 is not supported by this GPU (it needs compute capability 8.0+, e.g. "
                        "A100/H100) -- use dtype: fp16 (with loss scaling) or fp32")
    if cfg.sync_batchnorm:
        from asrkit.train.dist import check_sync_batchnorm, resolve_backend
        problem = check_sync_batchnorm(backend or resolve_backend(cfg.launch.dist_backend), device)
        if problem:
            problems.append(problem)
    from asrkit.train.dist import comm_hook_problem, resolve_backend
    problem = comm_hook_problem(cfg.ddp_conf.comm_hook, backend or resolve_backend(cfg.launch.dist_backend), device)
    if problem:
        problems.append(problem)
    if cfg.keep_global_batch and not cfg.reference_world_size:
        problems.append("keep_global_batch: true needs reference_world_size (the number of ranks the config "
                        "was tuned on, e.g. 4)")
    if args.checkpoint not in (None, "auto") and not Path(args.checkpoint).is_file():
        problems.append(f"--checkpoint {args.checkpoint}: file not found")
    if args.enc_init and not Path(args.enc_init).is_file():
        problems.append(f"--enc_init {args.enc_init}: file not found")
    if args.warm_start_data:
        if not Path(args.warm_start_data).is_file():
            problems.append(f"--warm_start_data {args.warm_start_data}: file not found")
        if args.warm_start_steps <= 0:
            problems.append("--warm_start_data needs --warm_start_steps N (N > 0 optimizer steps)")
        if args.enc_init:
            problems.append("--warm_start_data and --enc_init both choose the starting model: give one")
    return problems


def enc_init_flags(args) -> dict:
    """``--enc_init``/``--enc_init_mods`` for the ranks' agreement check (only when given)."""
    if not args.enc_init:
        return {}
    return {"--enc_init": Path(args.enc_init).name, "--enc_init_mods": args.enc_init_mods}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    model_dir = Path(args.model_dir)
    from asrkit.train import dist as D
    notes: list[str] = []
    try:
        cfg = load_config(args.config, args.override, notes=notes)
        warm_cfg = (load_config(args.config, args.override + args.warm_start_override)
                    if args.warm_start_data else None)
        spec = D.resolve_launch(cfg.launch, rank=args.rank, world_size=args.world_size,
                                local_rank=args.local_rank, init_method=args.init_method,
                                dist_backend=args.dist_backend)
        if spec.world_size > 1:
            D.check_init_method(spec.init_method)
            check_socket_ifname(master_host(spec.init_method, os.environ), os.environ, backend=spec.backend)
    except (ConfigError, D.LaunchError, NetworkCheckError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    problems = preflight(cfg, args, device, spec.backend)
    if problems:  # one line for one problem
        sep = " " if len(problems) == 1 else "\n  "
        print("error: cannot start training:" + sep + sep.join(problems), file=sys.stderr)
        return 2
    from asrkit.bin.bad_input import BAD_INPUT, load_text_inputs
    try:  # units, special_tokens, BPE model, CMVN: read and checked before anything is built
        for c in (cfg, warm_cfg):
            if c is not None:
                load_text_inputs(c, model_cmvn=True)
    except BAD_INPUT as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.num_threads or D.default_num_threads(spec.local_world_size))
    ctx = D.init_distributed(spec, timeout_s=cfg.launch.timeout_s)
    monitor = D.RankMonitor.for_context(ctx, cfg.launch.timeout_s)
    code, collective_failed = 1, False
    try:
        if args.warm_start_data:
            code = warm_start(warm_cfg, args, ctx, spec, notes, model_dir)
            if code != 0:
                return code
        code = run(cfg, args, ctx, spec, notes, model_dir)
        return code
    except AgreementError as e:
        code = 2
        _fatal(ctx, str(e), to_stderr=ctx.local_rank == 0)
        return code
    except (CheckpointError, NonFiniteError) as e:
        _fatal(ctx, f"training stopped: {e}", to_stderr=True)
        return code
    except Exception as e:
        if not (ctx.distributed and D.is_collective_failure(e)):
            raise
        collective_failed = True
        _fatal(ctx, monitor.explain(e), to_stderr=True)
        return code
    finally:
        monitor.stop({0: "finished", 4: "preempted"}.get(code, "failed"))
        # After a failed collective, an nccl group can hang in its destructor: leave it to the exit.
        if not (collective_failed and spec.backend == "nccl"):
            D.shutdown()
        close_logging()


def warm_start(cfg: TrainConfig, args, ctx, spec, notes: list[str], model_dir: Path) -> int:
    """The curriculum's first phase, when the main run starts fresh (no ``--checkpoint``, or
    ``auto`` finding none in ``model_dir``): train ``--warm_start_steps`` optimizer steps on
    ``--warm_start_data`` into ``<model_dir>/warm_start`` (same launch; ``cfg`` is the config
    with ``--warm_start_override`` applied last; an interrupted phase resumes there), then point
    ``args.enc_init`` at its newest checkpoint with ``--warm_start_mods``.  A run that resumes
    skips the phase: its own weights already went past it.  Every rank takes the same branch
    (model_dir is shared, as for resuming; the ranks' agreement checks catch it otherwise).
    Returns the phase's exit status (0: go on with the main run)."""
    from asrkit.train import checkpoint as ckpt
    resumes = args.checkpoint not in (None, "auto") or (
        args.checkpoint == "auto" and ckpt.find_resume_checkpoint(model_dir) is not None)
    if resumes:
        notes.append(f"warm start: the run resumes from its own checkpoint; {args.warm_start_data} is not "
                     "trained on again")
        return 0
    warm_dir = model_dir / "warm_start"
    if not (warm_dir / f"step_{args.warm_start_steps}.pt").is_file():
        phase = argparse.Namespace(**{**vars(args), "train_data": args.warm_start_data, "checkpoint": "auto",
                                      "max_steps": args.warm_start_steps, "warm_start_data": None,
                                      "tensorboard_dir": args.tensorboard_dir and f"{args.tensorboard_dir}/warm_start"})
        code = run(cfg, phase, ctx, spec, notes, warm_dir)
        if code != 0:
            return code
    start = ckpt.find_resume_checkpoint(warm_dir)
    if start is None:
        log.error("warm start: no usable checkpoint in %s", warm_dir)
        return 1
    args.enc_init, args.enc_init_mods = str(start), args.warm_start_mods
    return 0


def _fatal(ctx, msg: str, to_stderr: bool) -> None:
    """Log ``msg`` as an error (rank 0's log also goes to stderr); other ranks print it too
    when ``to_stderr``."""
    log.error("%s", msg)
    if to_stderr and not ctx.is_main:
        print(f"[rank {ctx.rank}] error: {msg}", file=sys.stderr, flush=True)


def run(cfg: TrainConfig, args, ctx, spec, notes: list[str], model_dir: Path) -> int:
    """Everything after the process group exists (``main`` tears it down afterwards)."""
    from asrkit.train import dist as D
    model_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(model_dir, ctx.rank)
    log.info(D.describe(ctx, spec))
    for note in notes:
        log.info("config: %s", note)
    monitor = ctx.monitor or D.RankMonitor(ctx, cfg.launch.timeout_s)  # (not started: phases only)

    from asrkit.train import agreement
    # WeNet shard lists (plain tar paths) are indexed here, before the ranks compare the
    # indexes; the cache goes next to the list, else into the experiment folder.
    monitor.set_phase("indexing WeNet shard lists (scanning the tars not cached yet)", "other")
    files = {**agreement.job_files(to_dict(cfg), args.train_data, args.cv_data),
             **agreement.shard_indexes(args.train_data, args.cv_data, args.model_dir)}
    monitor.set_phase("checking that the ranks agree (all-gathering config and file hashes)", "collective")
    agreement.check_agreement(ctx, to_dict(cfg), files,
                              extra={"--max_steps": args.max_steps, **enc_init_flags(args),
                                     "torch version": torch.__version__,
                                     "asrkit source": agreement.package_digest()})
    monitor.set_phase("building the tokenizer, loaders and model", "other")

    from asrkit.train import checkpoint as ckpt
    from asrkit.train.build import InitError, build_training
    from asrkit.train.preemption import EXIT_PREEMPTED, Preemption
    from asrkit.train.trainer import Trainer
    from asrkit.data.lists import ListError
    try:
        parts = build_training(cfg, args, ctx, monitor=monitor)
    except (InitError, ListError) as e:  # (a malformed list line: every rank read the same bytes)
        _fatal(ctx, str(e), to_stderr=True)
        return 2
    cfg = parts.cfg
    if ctx.is_main:
        # Only rank 0 writes into model_dir, so only it removes the temporaries a writer that
        # died mid-write left there -- before it writes anything itself (another rank doing it
        # could delete rank 0's file in the middle of its write).
        ckpt.remove_stale_temporaries(model_dir)
        dump_config(cfg, model_dir / "train.yaml")

    writer = None
    if ctx.is_main:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(args.tensorboard_dir or str(model_dir / "tensorboard"))
    preemption = Preemption()
    # The run steps with the scaled accum_grad (parts.train_cfg); train.yaml and checkpoints keep
    # the config as written (with reference_world_size/keep_global_batch), so it rescales on any
    # world size.
    trainer = Trainer(parts.train_cfg, ctx, parts.model, parts.optimizer, parts.scheduler, parts.train_loader,
                      parts.cv_loader, model_dir, config_dict=to_dict(cfg), scaler=parts.scaler, writer=writer,
                      max_steps=args.max_steps, preemption=preemption, comm_hook=parts.comm_hook)
    resume = args.checkpoint
    if resume == "auto":
        resume = ckpt.find_resume_checkpoint(model_dir)
        if resume is None:
            log.info("--checkpoint auto: no checkpoint in %s, starting fresh", model_dir)
    info = ckpt.read_info(resume) if resume else None
    monitor.set_phase("checking that the ranks resume from the same checkpoint", "collective")
    agreement.agree_on(ctx, "the checkpoint to resume from",
                       {"checkpoint": Path(resume).name if resume else None,
                        "step": (info or {}).get("step"), "epoch": (info or {}).get("epoch")},
                       hint="every rank must resume from the same checkpoint: with --checkpoint auto on several "
                            "nodes, model_dir must be on a shared filesystem (or copy the checkpoint to each node)")
    if resume:
        try:
            trainer.resume(resume)
        except CheckpointError as e:
            _fatal(ctx, f"cannot resume: {e}", to_stderr=True)
            return 2
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


if __name__ == "__main__":
    sys.exit(main())
