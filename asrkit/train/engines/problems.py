"""What an engine cannot run with: the settings ``torch_fsdp`` refuses before training
starts (``asrkit.train.preflight`` lists them with the rest; each is one line, exit status 2)."""
from __future__ import annotations

import torch

from asrkit.train.problems import Problem, ProblemKind


def engine_problems(cfg, device: torch.device) -> list[Problem]:
    """Why ``cfg``'s engine settings cannot run on ``device`` (empty when they can)."""
    if cfg.train_engine != "torch_fsdp" or cfg.fsdp_sharding_strategy == "no_shard":
        if cfg.fsdp_cpu_offload:
            return [Problem(ProblemKind.SETTING, "fsdp_cpu_offload: true needs train_engine: torch_fsdp with a "
                                                 "sharding strategy (it offloads FSDP's shards)",
                            "set fsdp_cpu_offload: false")]
        return []
    found = []

    def refuse(what: str, fix: str) -> None:
        found.append(Problem(ProblemKind.SETTING, what, fix))

    if cfg.fsdp_cpu_offload and device.type != "cuda":
        refuse(f"fsdp_cpu_offload: true keeps a GPU run's shards on the host (torch supports it with CUDA only), "
               f"but this run trains on {device.type}", "set fsdp_cpu_offload: false")
    if cfg.dtype == "fp16":
        refuse("dtype: fp16 with train_engine: torch_fsdp: asrkit's GradScaler path does not handle sharded "
               "gradients", "use dtype: bf16 (no loss scaling needed) or fp32")
    if cfg.ema_decay:
        refuse("ema_decay with train_engine: torch_fsdp: the weight EMA keeps a whole copy of the model on "
               "every rank, which sharding is there to avoid", "set ema_decay: 0, or use train_engine: torch_ddp")
    if cfg.use_lora or cfg.freeze_modules:
        refuse("use_lora / freeze_modules with train_engine: torch_fsdp: fine-tuning set-ups are not "
               "supported under sharding yet", "use train_engine: torch_ddp to fine-tune")
    if cfg.ddp_conf.comm_hook != "none":
        refuse(f"ddp_conf.comm_hook: {cfg.ddp_conf.comm_hook} is a DDP communication hook; torch_fsdp "
               f"reduce-scatters its gradients itself", "set ddp_conf.comm_hook: none")
    if cfg.sync_batchnorm:
        refuse("sync_batchnorm with train_engine: torch_fsdp is not supported",
               "use encoder_conf.cnn_module_norm: layer_norm, or train_engine: torch_ddp")
    return found
