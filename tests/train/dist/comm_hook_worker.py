"""One rank of the communication-hook checks in tests/train/dist/test_comm_hooks.py (started by
``tests.helpers.spawn_ranks``: a real 2-process gloo group on 127.0.0.1).

Each rank builds the tiny conformer of ``tests.helpers.tiny_config_dict`` (same weights on
every rank), feeds it its own random batches, and saves what rank 0's test compares to
``<out>/rank<r>.pt``:

* ``grads[hook]``: the all-reduced gradients of one backward through DDP with ``hook``
  registered by asrkit (``none``, ``fp16``, ``bf16``, and ``powersgd`` whose first
  all-reduces are plain);
* ``accum_grads[hook]``: the same over two micro-batches, the first under ``no_sync``;
* ``powersgd_losses``: the mean loss of each of 12 SGD steps with rank-1 PowerSGD from step 2,
  and ``powersgd_stats`` torch's (compression rate, elements before, elements after);
* ``resumed``: for two models resumed alike (``CommHook.resumed_at``) from one state, their
  weights after 4 steps and whether PowerSGD compressed;
* ``finite_after_nan``: per all-reduce of PowerSGD, whether the gradients were finite, when
  rank 1's loss is NaN in the third (the first compressed one);
* ``buffers``: a state-dict buffer and a constant buffer after one DDP forward, each rank
  having started with its rank as their value;

and then, in ``<out>/buckets_rank<r>.pt``, how 8 PowerSGD steps over many small DDP buckets
went (written last: a collective mismatch aborts the process).
"""
from __future__ import annotations

import copy
import datetime

import torch
import torch.distributed as dist

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.models import build_model
from asrkit.text.vocabulary import Vocabulary
from asrkit.train.dist import DistContext, register_comm_hook, wrap_ddp
from asrkit.train.schema import DdpConf
from tests.helpers import random_batch, tiny_config_dict

FEAT_DIM, VOCAB = 40, 10
HOOKS = ("none", "fp16", "bf16", "powersgd")


def _loss(model, batch) -> torch.Tensor:
    return model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])["loss"]


def _ddp(base, ctx, conf: DdpConf, seed: int = 777):
    model = wrap_ddp(copy.deepcopy(base), ctx, find_unused_parameters=False)
    return model, register_comm_hook(model, conf, seed)


def _grads(model) -> list:
    return [p.grad.detach().clone() for p in model.parameters()]


def _sgd_steps(model, batch, steps: int, lr: float = 0.02) -> list:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = _loss(model, batch)
        (loss / batch["feats"].size(0)).backward()
        opt.step()
        losses.append(float(loss.detach()) / batch["feats"].size(0))
    return losses


class _WithBuffers(torch.nn.Module):
    """A linear layer with a state-dict buffer and a constant (``persistent=False``) one."""

    def __init__(self, rank: int):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.register_buffer("stats", torch.full((2,), float(rank)))
        self.register_buffer("table", torch.full((2,), float(rank)), persistent=False)

    def forward(self, x):
        return self.linear(x + self.stats + self.table)


def _buffers_after_forward(ctx, rank: int) -> dict:
    """This rank's buffers after one DDP forward (each rank started with its own values)."""
    model = wrap_ddp(_WithBuffers(rank), ctx, find_unused_parameters=False)
    model(torch.ones(1, 2)).sum().backward()
    return {"stats": model.module.stats.tolist(), "table": model.module.table.tolist()}


def _many_buckets(ctx, base, batch, steps: int = 8) -> dict:
    """PowerSGD over DDP buckets of 10 kB (a few dozen buckets): torch's hook left unwaited
    made the ranks' all-reduces mismatch here at every run (gloo aborts the process)."""
    from torch.nn.parallel import DistributedDataParallel
    model = DistributedDataParallel(copy.deepcopy(base), bucket_cap_mb=0.01)
    hook = register_comm_hook(model, DdpConf(comm_hook="powersgd", powersgd_start_iter=2), 777)
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        _loss(model, batch).backward()
    return {"steps": steps, "iter": hook.powersgd.iter, "compressed": hook.powersgd.compression_stats()[2] > 0}


def run(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        ctx = DistContext(rank=rank, world_size=2, backend="gloo")
        torch.manual_seed(0)
        cfg = build(TrainConfig, tiny_config_dict())
        base = build_model(cfg, FEAT_DIM, Vocabulary.of_size(VOCAB))
        gen = torch.Generator().manual_seed(100 + rank)
        batches = [random_batch(gen, 4, feat_dim=FEAT_DIM, vocab=VOCAB) for _ in range(2)]
        result = {"grads": {}, "accum_grads": {}}
        for hook in HOOKS:
            conf = DdpConf(comm_hook=hook, powersgd_start_iter=2)
            model, _ = _ddp(base, ctx, conf)
            _loss(model, batches[0]).backward()
            result["grads"][hook] = _grads(model)
            model, _ = _ddp(base, ctx, conf)
            with model.no_sync():
                _loss(model, batches[0]).backward()
            _loss(model, batches[1]).backward()
            result["accum_grads"][hook] = _grads(model)

        model, hook = _ddp(base, ctx, DdpConf(comm_hook="powersgd", powersgd_rank=1, powersgd_start_iter=2))
        result["powersgd_losses"] = _sgd_steps(model, batches[0], 12)
        result["powersgd_stats"] = hook.powersgd.compression_stats()

        resumed = []
        for _ in range(2):
            model, hook = _ddp(base, ctx, DdpConf(comm_hook="powersgd", powersgd_start_iter=6))
            hook.resumed_at(5)  # as after a checkpoint at step 5: compression from all-reduce 2 on
            _sgd_steps(model, batches[1], 4)
            resumed.append({"weights": [p.detach().clone() for p in model.parameters()],
                            "compressed": hook.powersgd.compression_stats()[2] > 0,
                            "start": hook.powersgd.start_powerSGD_iter})
        result["resumed"] = resumed

        model, hook = _ddp(base, ctx, DdpConf(comm_hook="powersgd", powersgd_start_iter=2))
        finite = []
        for step in range(4):  # rank 1's loss is NaN in the first compressed step (2)
            model.zero_grad(set_to_none=True)
            loss = _loss(model, batches[0])
            (loss * float("nan") if step == 2 and rank == 1 else loss).backward()
            finite.append(all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()))
        result["finite_after_nan"] = finite
        result["buffers"] = _buffers_after_forward(ctx, rank)
        torch.save(result, f"{out}/rank{rank}.pt")
        torch.save(_many_buckets(ctx, base, batches[0]), f"{out}/buckets_rank{rank}.pt")
    finally:
        dist.destroy_process_group()
