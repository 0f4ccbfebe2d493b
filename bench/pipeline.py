"""The training pipeline the benchmarks time: config -> loader (real data, workers) ->
model -> optimizer, built exactly as ``asrkit.bin.train`` builds them, and one training
step (forward, backward, clip, optimizer, scheduler)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asrkit.config import apply_overrides, build, read_yaml, TrainConfig  # noqa: E402


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

    def forward_backward(self, batch: dict) -> None:
        out = self.model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
        (out["loss"] / batch["feats_lengths"].numel()).backward()

    def optimizer_step(self) -> None:
        torch.nn.utils.clip_grad_norm_([q for q in self.model.parameters() if q.requires_grad],
                                       self.cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


def build_pipeline(args, rank: int = 0, world_size: int = 1) -> Pipeline:
    """Everything from ``add_pipeline_args``' options; rank/world_size shard the data."""
    raw = read_yaml(args.config)
    raw = apply_overrides(raw, [f"tokenizer_conf.symbol_table_path={args.units}",
                                f"dataset_conf.num_workers={args.num_workers}", *args.override])
    if args.cmvn:
        raw = apply_overrides(raw, ["cmvn=global_cmvn", f"cmvn_conf.cmvn_file={args.cmvn}"])
    cfg = build(TrainConfig, raw)
    torch.manual_seed(cfg.seed)

    from asrkit.data.dataset import build_dataloader
    from asrkit.data.lists import read_list
    from asrkit.data.processors import build_sample_processor
    from asrkit.models import build_model
    from asrkit.text import build_tokenizer
    from asrkit.train.scheduler import build_optimizer, build_scheduler

    tok = build_tokenizer(cfg)
    proc = build_sample_processor(cfg.dataset_conf, tok, train=True, seed=cfg.seed)
    loader = build_dataloader(read_list(args.data), cfg.dataset_conf, proc, train=True, seed=cfg.seed,
                              rank=rank, world_size=world_size)
    model = build_model(cfg, cfg.dataset_conf.fbank_conf.num_mel_bins, tok.vocabulary).train()
    optimizer = build_optimizer(cfg, model.parameters())
    return Pipeline(cfg, loader, model, optimizer, build_scheduler(cfg, optimizer))


def matmul_peak(threads: int, n: int = 1024, repeats: int = 20) -> float:
    """Measured fp32 GFLOP/s of a square matmul with ``threads`` threads."""
    import time
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e9
