"""Top-level config keys owned by the trainer (merged into ``asrkit.config.TrainConfig``):
optimizer, scheduler, precision, intervals, launch, and the keys WeNet's trainer adds to
the ``train.yaml`` it saves."""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, Optional

from asrkit.config_versions import CONFIG_VERSION
from asrkit.schema import (REQUIRED, WenetKey, any_value, between, checked, kind_key_problems, non_negative,
                           only, optional, positive)


@dataclasses.dataclass
class OptimConf:
    """``optim_conf``: Adam/AdamW hyper-parameters; the defaults are torch's, as in WeNet
    (which passes ``optim_conf`` to ``torch.optim.Adam`` as it is)."""

    lr: float = checked(0.001, positive)
    weight_decay: float = checked(0.0, non_negative)
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])
    eps: float = checked(1e-8, positive)


@dataclasses.dataclass
class SchedulerConf:
    """``scheduler_conf``: the keys of WeNet's two schedulers (``None``: not given; which
    keys each takes, and their defaults, in :data:`SCHEDULER_PARAMS`).

    * ``warmuplr``: ``warmup_steps`` (25000);
    * ``NoamHoldAnnealing`` (NeMo's, from Squeezeformer): ``max_steps`` (required),
      ``warmup_steps`` or ``warmup_ratio`` (one, required), ``hold_steps`` or ``hold_ratio``
      (at most one; none: no hold), ``decay_rate`` (0.5), ``min_lr`` (0.0).

    The formulas are :mod:`asrkit.train.scheduler`'s."""

    warmup_steps: Optional[int] = checked(None, optional(positive))
    warmup_ratio: Optional[float] = checked(None, optional(between(0.0, 1.0)))
    hold_steps: Optional[int] = checked(None, optional(non_negative))
    hold_ratio: Optional[float] = checked(None, optional(between(0.0, 1.0)))
    max_steps: Optional[int] = checked(None, optional(positive))
    decay_rate: Optional[float] = checked(None, optional(positive))
    min_lr: Optional[float] = checked(None, optional(non_negative))


# per scheduler: its keys and their defaults (REQUIRED: no default; None: optional, no default)
SCHEDULER_PARAMS: dict[str, dict[str, Any]] = {
    "warmuplr": {"warmup_steps": 25000},
    "NoamHoldAnnealing": {"max_steps": REQUIRED, "warmup_steps": None, "warmup_ratio": None,
                          "hold_steps": None, "hold_ratio": None, "decay_rate": 0.5, "min_lr": 0.0},
}


def scheduler_problems(kind: str, conf: SchedulerConf) -> list[str]:
    """What is wrong with ``scheduler_conf`` for ``scheduler: kind`` (one message per problem;
    WeNet's own checks -- one of steps or ratio, a warmup for the Noam decay -- included)."""
    problems = kind_key_problems("scheduler_conf", "scheduler", kind, conf, SCHEDULER_PARAMS[kind])
    if kind == "NoamHoldAnnealing":
        for what in ("warmup", "hold"):
            if getattr(conf, f"{what}_steps") is not None and getattr(conf, f"{what}_ratio") is not None:
                problems.append(f"scheduler_conf: {what}_steps or {what}_ratio, not both")
        warmup = conf.warmup_steps or int((conf.warmup_ratio or 0.0) * (conf.max_steps or 0))
        if warmup <= 0:
            problems.append("scheduler_conf: scheduler NoamHoldAnnealing needs a warmup "
                            "(warmup_steps, or warmup_ratio of max_steps, >= 1 step)")
    return problems


@dataclasses.dataclass
class LaunchConf:
    """``launch``: how this process joins the job.  The only section allowed to differ
    between nodes (ranks and addresses legitimately do).  Precedence: torchrun
    environment > command-line flags > this section."""

    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    init_method: str = "env://"
    # Seconds any collective (and any wait for the data loader) may block before the job
    # fails naming the rank and what it was doing (asrkit.train.dist.monitor.RankMonitor).
    timeout_s: float = checked(1800.0, positive)


@dataclasses.dataclass
class DdpConf:
    """``ddp_conf``: how DDP communicates the gradients -- the same on every node (unlike
    ``launch``; the ranks' agreement preflight compares it), so it is a section of its own.

    ``comm_hook`` (``asrkit.train.dist.comm_hooks``; torch's DDP communication hooks):

    * ``none``: DDP's own all-reduce of the fp32 gradient buckets;
    * ``fp16`` / ``bf16``: each bucket cast to float16 / bfloat16, divided by the world
      size, all-reduced and cast back (half the bytes on the wire; ``bf16`` where the
      backend all-reduces bfloat16 tensors on this device: nccl, or gloo on CPU);
    * ``powersgd``: rank-``powersgd_rank`` PowerSGD with error feedback and warm start,
      after ``powersgd_start_iter`` uncompressed all-reduces (torch's ``PowerSGDState``;
      >= 2, as DDP rebuilds its buckets after the first).
    """

    comm_hook: Literal["none", "fp16", "bf16", "powersgd"] = "none"
    powersgd_rank: int = checked(1, positive)
    powersgd_start_iter: int = checked(1000, lambda v: None if v >= 2 else
                                       f"must be >= 2 (DDP rebuilds its gradient buckets after the first "
                                       f"all-reduce, and PowerSGD's error feedback needs the final ones), got {v!r}")


@dataclasses.dataclass
class TrainerSections:
    """Trainer-level keys (WeNet names)."""

    accum_grad: int = checked(1, positive)
    grad_clip: float = checked(50.0, positive)  # WeNet's executor default
    max_epoch: int = checked(100, positive)
    log_interval: int = checked(100, positive)
    save_interval: int = checked(0, non_negative)
    optim: Literal["adam", "adamw"] = "adam"
    optim_conf: OptimConf = dataclasses.field(default_factory=OptimConf)
    scheduler: Literal["warmuplr", "NoamHoldAnnealing"] = "warmuplr"
    scheduler_conf: SchedulerConf = dataclasses.field(default_factory=SchedulerConf)
    # auto (asrkit's): bf16 where the device computes it natively, else fp32 -- decided on each
    # rank at start and logged (asrkit.train.precision.resolve_auto_dtype)
    dtype: Literal["fp32", "fp16", "bf16", "auto"] = "fp32"
    seed: int = 777
    # the meaning of the keys (asrkit.config_versions); load_config reads older ones
    config_version: int = checked(CONFIG_VERSION, lambda v: None if 1 <= v <= CONFIG_VERSION else
                                  f"must be 1..{CONFIG_VERSION} (a newer asrkit wrote this config?), got {v!r}")
    cv_interval: int = checked(0, non_negative)
    early_stop_patience: int = checked(0, non_negative)
    keep_checkpoint_max: int = checked(3, positive)
    # Weight EMA (asrkit.train.ema): the decay of the shadow updated after each optimizer
    # step; 0 or null: off.  Decoded with `average_model --mode ema` (docs/training.md).
    ema_decay: Optional[float] = checked(None, lambda v: None if v is None or 0.0 <= v < 1.0 else
                                         f"must be in [0, 1) (0 or null: no EMA), got {v!r}")
    max_nonfinite_steps: int = checked(10, positive)
    # World-size scaling: the world size this config was tuned on (0: not stated) and
    # whether to scale accum_grad so the global batch stays the reference's.
    reference_world_size: int = checked(0, non_negative)
    keep_global_batch: bool = False
    # Batch-norm conv modules as torch.nn.SyncBatchNorm (CUDA + nccl only).
    sync_batchnorm: bool = False
    # Gradient communication (DDP communication hook): equal on every node, unlike launch.
    ddp_conf: DdpConf = dataclasses.field(default_factory=DdpConf)
    # The training engine (asrkit.train.engines; WeNet's names and values): torch_ddp replicates
    # the model on every rank, torch_fsdp shards it (torch's FSDP2, fully_shard) as
    # fsdp_sharding_strategy says -- zero2: parameters, gradients and optimizer state sharded,
    # parameters kept gathered from forward to the end of backward; zero3: re-gathered for the
    # backward; model: encoder and decoder as two units; no_shard: DDP (logged).
    train_engine: Literal["torch_ddp", "torch_fsdp"] = "torch_ddp"
    fsdp_sharding_strategy: Literal["no_shard", "model", "zero2", "zero3"] = "zero2"
    fsdp_cpu_offload: bool = False        # sharded parameters and optimizer state on the host (CUDA only)
    fsdp_sync_module_states: bool = False  # broadcast rank 0's weights before sharding
    launch: LaunchConf = dataclasses.field(default_factory=LaunchConf)
    # asrkit's own (WeNet has no such key): regional torch.compile -- each encoder and decoder
    # block compiled in place (asrkit.train.compile), the rest eager; off by default, kept only
    # where the GPU check measures it faster end to end, compile warm-up included.
    compile_blocks: bool = False
    # asrkit's own (WeNet has none): torch's cuDNN attention backend for training on a GPU. Off:
    # from torch 2.9 it is preferred on sm90/sm100 and builds a graph for every new batch shape;
    # on an H200 in bf16 a step on a new shape took 0.86 s against 0.15 s, with it off 0.20 s
    # against 0.17 s, and a first epoch ran 3x faster (docs/performance.md, "GPU check").
    cudnn_sdpa: bool = False

    def validate(self) -> list[str]:
        """The keys of ``scheduler_conf`` against the scheduler that reads them."""
        return scheduler_problems(self.scheduler, self.scheduler_conf)

    # What WeNet's trainer adds to the train.yaml it saves (wenet/utils/train_utils.py,
    # check_modify_and_save_config; init_infos: wenet/utils/init_model.py).
    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "use_amp": any_value(
            bool, "WeNet's switch for fp16 autocast with a GradScaler under torch_ddp, which is "
                  "asrkit's dtype: fp16; it agrees with dtype",
            check=lambda v, raw: _wenet_precision(v, raw)),
        "model_dir": any_value(
            str, "WeNet's record of its --model_dir; asrkit's experiment directory is its --model_dir"),
        "save_states": only(
            "model_only", "model+optimizer",
            reason="read by WeNet's deepspeed engine only, no effect under torch_ddp; "
                   "asrkit's checkpoints always hold the whole training state"),
        "init_infos": any_value(
            dict[str, Any], "WeNet's trainer overwrites it from its --checkpoint, so a config's "
                            "value means nothing; asrkit resumes from its checkpoint's own state"),
    }


def _wenet_precision(use_amp: bool, raw: dict) -> Optional[str]:
    """WeNet's torch_ddp engine autocasts only with ``use_amp``, and then in fp16 with a
    GradScaler (whatever its ``dtype`` says): the ``dtype`` asrkit runs must be that."""
    dtype = raw.get("dtype", "fp32")
    wanted = "fp16" if use_amp else "fp32"
    if dtype == wanted:
        return None
    return (f"WeNet trains this config in {wanted} (its torch_ddp engine autocasts only with use_amp: true, "
            f"and then in fp16), but dtype is {dtype!r}; set dtype: {wanted}"
            + ("" if use_amp else ", or use_amp: true with dtype: fp16"))
