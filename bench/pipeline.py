"""The training pipeline the benchmarks time: config -> loader (real data, workers) ->
model -> optimizer, built by ``asrkit.bin.train``'s own ``build_training``, and one training
step (forward, backward, clip, optimizer, scheduler)."""
from __future__ import annotations

import argparse
import dataclasses

import torch

from asrkit.config import apply_overrides, read_yaml, TrainConfig

from asrkit.schema import build
from asrkit.train.build import build_training
from asrkit.train.dist import DistContext
from asrkit.train.precision import resolve_auto_dtype


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True)
    p.add_argument("--data", required=True, help="data.list to train on")
    p.add_argument("--units", required=True)
    p.add_argument("--cmvn", default=None)
    p.add_argument("--num_workers", type=int, default=1)
    p.add_argument("--override", action="append", default=[])


@dataclasses.dataclass
class Pipeline:
    cfg: TrainConfig
    loader: object
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    epoch: int = 0
    _it: object = None

    def next_batch(self) -> dict:
        """The next non-empty batch, starting a new epoch when one ends."""
        while True:
            if self._it is None:
                self.loader.set_epoch(self.epoch)
                self._it = iter(self.loader)
            try:
                batch = next(self._it)
            except StopIteration:
                self.epoch += 1
                self._it = None
                continue
            if batch["feats_lengths"].numel():
                return batch

    def autocast(self):
        """The trainer's precision context: autocast in ``cfg.dtype`` (nothing for fp32)."""
        import contextlib
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.cfg.dtype)
        return contextlib.nullcontext() if dtype is None else torch.autocast("cpu", dtype=dtype)

    def forward(self, batch: dict) -> dict:
        with self.autocast():
            return self.model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])

    def forward_backward(self, batch: dict) -> None:
        out = self.forward(batch)
        (out["loss"] / batch["feats_lengths"].numel()).backward()

    def optimizer_step(self) -> None:
        torch.nn.utils.clip_grad_norm_([q for q in self.model.parameters() if q.requires_grad],
                                       self.cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


def build_pipeline(args, rank: int = 0, world_size: int = 1) -> Pipeline:
    """Everything from ``add_pipeline_args``' options, built by ``asrkit.train.build.build_training``
    (what ``asrkit.bin.train`` runs); rank/world_size shard the data.  The model is returned
    bare: ``bench/ddp_scaling.py`` wraps it with the DDP options it compares."""
    raw = read_yaml(args.config)
    raw = apply_overrides(raw, [f"tokenizer_conf.symbol_table_path={args.units}",
                                f"dataset_conf.num_workers={args.num_workers}", *args.override])
    if args.cmvn:
        raw = apply_overrides(raw, ["cmvn=global_cmvn", f"cmvn_conf.cmvn_file={args.cmvn}"])
    cfg = build(TrainConfig, raw)
    if cfg.dtype == "auto":  # as the trainer decides it (asrkit.train.entry.load_final_config)
        dtype, why = resolve_auto_dtype(torch.device("cpu"))
        print(why)
        cfg = build(TrainConfig, apply_overrides(raw, [f"dtype={dtype}"]))
    ctx = DistContext(rank=rank, world_size=world_size)
    parts = build_training(cfg, ctx, train_data=args.data, ddp=False)
    return Pipeline(parts.cfg, parts.train_loader, parts.bare_model.train(), parts.optimizer, parts.scheduler)


def matmul_peak(threads: int, n: int = 1024, repeats: int = 20, dtype: str = "fp32") -> float:
    """Measured GFLOP/s of a square ``n``-by-``n`` matmul with ``threads`` threads in ``dtype``
    (``fp32``, ``bf16``, ``fp16``)."""
    import time
    torch.set_num_threads(threads)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e9
