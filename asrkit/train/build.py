"""``build_training``: the one place that turns a validated config into the parts of a
training run -- tokenizer, sample processors, loaders, model (optionally started from
another run's modules, DDP-wrapped), optimizer, scheduler and grad scaler.

``asrkit.train.run``, the benchmarks in ``bench/`` and the tests all build through it, so
what they time or check is what training runs.  The order of construction is fixed
(seed, tokenizer, lists, processors, loaders, model): the model's initial weights depend
on it, and so does every reproduced result.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from asrkit.allocator import memory_allocator
from asrkit.config import TrainConfig
from asrkit.data.dataset import build_dataloader
from asrkit.data.lists import ListError, read_list
from asrkit.data.mixing import ListMix
from asrkit.data.processors import build_sample_processor
from asrkit.finetune.setup import AdaptError, Adaptation, adapt
from asrkit.config_files import ModelInputs, load_model_inputs
from asrkit.models import build_model
from asrkit.train.compile import compile_blocks
from asrkit.train.dist import MonitoredLoader, count_batchnorm
from asrkit.train.dist.context import DistContext
from asrkit.train.engines import TrainingEngine, build_engine
from asrkit.train.dist.scaling import scale_accum_grad
from asrkit.train.job import ModuleInit
from asrkit.train.precision import cpu_precision
from asrkit.train.scheduler import build_optimizer, build_scheduler

log = logging.getLogger("asrkit.train")


class InitError(RuntimeError):
    """The model could not be built from the config (a builder's ``ValueError``: values the
    schema lets through that the encoder cannot take, e.g. an Efficient Conformer's even
    kernel after a stride) or its start could not be set up: ``--enc_init`` (missing module,
    shape mismatch, bad checkpoint, a changed vocabulary), LoRA or frozen modules
    (``asrkit.finetune``)."""


@dataclasses.dataclass
class TrainingParts:
    """What :func:`build_training` returns.

    ``cfg`` is the resolved config (``input_dim``/``output_dim`` filled in): what
    ``train.yaml`` and the checkpoints record.  ``train_cfg`` is the same with the world-size
    scaled ``accum_grad`` (``keep_global_batch``): what the executor steps with.
    ``adaptation`` (``asrkit.finetune.setup``) says what the run's checkpoints store.
    ``model`` is ``bare_model`` as ``engine`` (``asrkit.train.engines``: the ``train_engine``'s)
    trains it -- wrapped in DDP, or sharded by FSDP in place, when the process group has
    several ranks (and ``ddp=True``); ``comm_hook`` is the DDP communication hook of
    ``ddp_conf`` registered on it (None when there is none); ``scaler`` is the fp16
    GradScaler or None."""

    cfg: TrainConfig
    train_cfg: TrainConfig
    tokenizer: Any
    train_entries: list
    cv_entries: list
    train_loader: Any
    cv_loader: Optional[Any]
    bare_model: torch.nn.Module
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Optional[torch.amp.GradScaler]
    comm_hook: Optional[Any] = None  # asrkit.train.dist.comm_hooks.CommHook
    adaptation: Adaptation = dataclasses.field(default_factory=Adaptation)  # what checkpoints store
    cv_parts: list = dataclasses.field(default_factory=list)  # [(CV list path, its loader)], one per list
    engine: Optional[TrainingEngine] = None  # how model is trained over the ranks (None: the caller's own wrapping)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators (model initialisation)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def amp_scaler(cfg: TrainConfig, device: torch.device) -> Optional[torch.amp.GradScaler]:
    """The GradScaler for ``dtype: fp16`` on ``device`` (CUDA or CPU; None otherwise: fp32
    needs none and bf16 has fp32's exponent range).  Its calibration skips -- steps it
    drops while it lowers the scale -- are counted apart from non-finite faults by the
    executor."""
    if cfg.dtype == "fp16":
        return torch.amp.GradScaler(device.type)
    return None


def log_precision(cfg: TrainConfig, device: torch.device, scaler) -> None:
    """Log the run's precision; on a CPU the decision of :func:`asrkit.train.precision.cpu_precision`
    (a warning where the CPU has no native support for the dtype)."""
    if cfg.dtype == "fp32":
        return
    if device.type == "cpu":
        choice = cpu_precision(cfg.dtype)
        (log.warning if choice.warning else log.info)("mixed precision: %s", choice.line)
        return
    log.info("mixed precision: %s autocast on %s%s; CTC is computed in fp32", cfg.dtype, device,
             " with a dynamic GradScaler (its calibration skips are counted apart from faults)"
             if scaler is not None else " (no loss scaling needed)")


def choose_attention_backend(cfg: TrainConfig, device: torch.device) -> None:
    """On CUDA, switch torch's cuDNN attention backend (process-wide) as ``cudnn_sdpa`` says;
    ``scaled_dot_product_attention`` then picks among flash, memory-efficient and math.
    Nothing changes on other devices (cuDNN attention is CUDA's alone)."""
    if device.type != "cuda":
        return
    torch.backends.cuda.enable_cudnn_sdp(cfg.cudnn_sdpa)
    log.info("attention: cuDNN's scaled-dot-product attention %s (cudnn_sdpa: %s)",
             "allowed" if cfg.cudnn_sdpa else "off, no graph built per new batch shape",
             str(cfg.cudnn_sdpa).lower())


def effective_batch(cfg: TrainConfig, world_size: int) -> str:
    """The per-rank batch, accum_grad and the effective global batch of one optimizer step."""
    b = cfg.dataset_conf.batch_conf
    per_rank = (f"{b.batch_size} utterances" if b.batch_type == "static"
                else f"up to {b.max_frames_in_batch} frames ({b.batch_type})")
    groups = cfg.accum_grad * world_size
    return (f"batch per rank: {per_rank}; accum_grad {cfg.accum_grad}; world size {world_size}; "
            f"effective global batch per optimizer step: {groups} x that")


def _scaled_accum_grad(cfg: TrainConfig, ctx: DistContext) -> int:
    """``accum_grad`` scaled for this world size (logged when it changes anything)."""
    accum, scaling, inexact = scale_accum_grad(cfg.accum_grad, ctx.world_size, cfg.reference_world_size,
                                               cfg.keep_global_batch)
    if scaling:
        (log.warning if inexact else log.info)("world-size scaling: %s", scaling)
    return accum


def build_training(cfg: TrainConfig, ctx: DistContext, *, train_data: str | Sequence[str] | ListMix,
                   cv_data: str | Sequence[str] | None = None,
                   cache_dir: Optional[Path] = None, inputs: Optional[ModelInputs] = None,
                   init: Optional[ModuleInit] = None, ddp: bool = True) -> TrainingParts:
    """Build every part of a training run of ``cfg`` for this rank.

    ``train_data``: a data.list path, several (concatenated), or a :class:`~asrkit.data.mixing.ListMix`
    (weighted lists, sampled per epoch in proportion); ``cv_data``: one path or several
    (``cv_parts``: a loader per list, each reported apart; ``cv_loader``: the loader of a
    single list, None for several or none);
    ``cache_dir`` is where the index of a WeNet shard list is cached when its own folder
    cannot be written.  ``inputs`` are the config's units/BPE/CMVN files as
    ``asrkit.config_files.load_model_inputs(cfg, model_cmvn=True)`` loaded them (loaded here when
    None).  ``init`` starts the named modules from another checkpoint (a failure raises
    :class:`InitError`; a list without entries, or with a malformed line, raises
    ``asrkit.data.lists.ListError``).  The loaders shard by ``ctx.rank``/``ctx.world_size``; with
    ``ctx.monitor`` (``asrkit.train.dist.RankMonitor``) they record their waits in it.
    ``ddp=False`` returns the bare model in ``model`` too (for callers that wrap it
    themselves, e.g. a benchmark comparing DDP options), and no ``engine``."""
    accum_grad = _scaled_accum_grad(cfg, ctx)
    scaler = amp_scaler(cfg, ctx.device)
    log_precision(cfg, ctx.device, scaler)
    choose_attention_backend(cfg, ctx.device)
    seed_everything(cfg.seed)

    inputs = inputs or load_model_inputs(cfg, model_cmvn=True)
    tokenizer = inputs.tokenizer
    mix = train_data if isinstance(train_data, ListMix) else ListMix.parse(train_data)
    cv_paths = ([cv_data] if isinstance(cv_data, str) else list(cv_data)) if cv_data else []
    read = {path: read_list(path, cache_dir) for path in dict.fromkeys([*mix.paths, *cv_paths])}
    for path, entries in read.items():
        if not entries:  # (preflight catches an empty file; this, e.g. a WeNet shard list of empty tars)
            raise ListError(f"{path}: the data list has no entries (nothing to train or validate on)")
    train_entries = [e for path in mix.paths for e in read[path]]
    cv_entries = [e for path in cv_paths for e in read[path]]
    sizes = [len(read[path]) for path in mix.paths]
    bounds = np.cumsum([0, *sizes])
    ranges = list(zip(bounds[:-1], bounds[1:]))
    if len(mix.paths) > 1:
        log.info("training lists: %s", mix.describe(sizes))
    input_dim = cfg.dataset_conf.feat_dim
    cfg = dataclasses.replace(cfg, input_dim=input_dim, output_dim=tokenizer.vocab_size)
    train_cfg = dataclasses.replace(cfg, accum_grad=accum_grad)

    def loader(entries, train: bool, mixed=None):
        proc = build_sample_processor(cfg.dataset_conf, tokenizer, train=train, seed=cfg.seed,
                                      cmvn_stats=inputs.data_cmvn)
        built = build_dataloader(entries, cfg.dataset_conf, proc, train=train, seed=cfg.seed,
                                 rank=ctx.rank, world_size=ctx.world_size, mix=mixed)
        return MonitoredLoader(built, ctx.monitor, "train" if train else "cv") if ctx.monitor is not None else built

    train_loader = loader(train_entries, True, (ranges, mix.weights) if mix.weights else None)
    # one loader per CV list: several are reported apart, the run's CV loss is over all together
    cv_parts = [(path, loader(read[path], False)) for path in cv_paths]
    cv_loader = cv_parts[0][1] if len(cv_parts) == 1 else None

    try:
        bare_model = build_model(cfg, input_dim, tokenizer.vocabulary, cmvn_stats=inputs.model_cmvn).to(ctx.device)
    except ValueError as e:  # (a builder's one-line refusal of values the schema lets through, e.g. WeNet's asserts)
        raise InitError(str(e)) from e
    n_params = sum(p.numel() for p in bare_model.parameters())
    log.info("model: %s encoder + %s decoder, %.2f M parameters; %d train / %d CV utterances; "
             "%d threads; memory allocator: %s", cfg.encoder, cfg.decoder, n_params / 1e6, len(train_entries),
             len(cv_entries), torch.get_num_threads(), memory_allocator())
    try:  # --enc_init, LoRA, frozen modules
        adaptation = adapt(bare_model, cfg, init)
    except AdaptError as e:
        raise InitError(str(e)) from e
    if cfg.sync_batchnorm and not count_batchnorm(bare_model):
        log.info("sync_batchnorm: the model has no BatchNorm layer (encoder_conf.cnn_module_norm: %s); "
                 "nothing to convert", getattr(cfg.encoder_conf, "cnn_module_norm", "?"))
    elif cfg.sync_batchnorm and not ctx.distributed:
        log.info("sync_batchnorm: one process, nothing to synchronise; BatchNorm left as it is")
    if cfg.compile_blocks:  # (asrkit's regional torch.compile: asrkit.train.compile)
        compile_blocks(bare_model)
    engine = build_engine(cfg, ctx) if ddp else None  # (the caller that wraps the model itself also chooses its hook)
    model = engine.wrap(bare_model) if engine is not None else bare_model
    comm_hook = getattr(engine, "comm_hook", None)
    log.info(effective_batch(train_cfg, ctx.world_size))
    # frozen parameters get no optimizer state (asrkit.finetune.freeze)
    optimizer = build_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
    scheduler = build_scheduler(cfg, optimizer)
    return TrainingParts(cfg, train_cfg, tokenizer, train_entries, cv_entries, train_loader, cv_loader,
                         bare_model, model, optimizer, scheduler, scaler, comm_hook, adaptation, cv_parts, engine)
