#!/usr/bin/env python3
"""Per-step cost of the executor's own synchronisation under DDP, on CPU (gloo).

    python bench/step_overhead.py [--procs 2 --accum_grad 4 --steps 20 --warmup 3 --batch 2 --frames 40]

Spawns ``--procs`` gloo processes (one thread each).  Every rank builds the tiny
deterministic conformer of the tests, wraps it in DistributedDataParallel and runs
``Executor.train_epoch`` over ``(warmup + steps) x accum_grad`` in-memory random
micro-batches (no data loading).  Reported (one JSON line): the median wall time of an
optimizer step after ``--warmup`` (slowest rank), and the Python-level collectives
(``torch.distributed.all_reduce``/``broadcast``/...) issued per optimizer step inside
``train_epoch``; DDP's own gradient all-reduce and buffer broadcast run in C++ and are not
in that count.  Small batches (``--batch``, ``--frames``) make the synchronisation's share
of a step visible.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.models import build_model
from asrkit.text.vocabulary import Vocabulary
from asrkit.train.dist import DistContext, wrap_ddp
from asrkit.train.executor import Executor, TrainState
from asrkit.train.scheduler import build_optimizer, build_scheduler
if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers import free_port, random_batch, tiny_config_dict

COLLECTIVES = ("all_reduce", "broadcast", "all_gather_object", "gather_object", "barrier")


def count_collectives() -> dict:
    """Wrap the Python-level collectives of ``torch.distributed``; returns the live counter."""
    counter = {"n": 0}
    for name in COLLECTIVES:
        original = getattr(dist, name)

        def counted(*args, _original=original, **kwargs):
            counter["n"] += 1
            return _original(*args, **kwargs)

        setattr(dist, name, counted)
    return counter


def worker(rank: int, world: int, port: int, opts: dict, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        counter = count_collectives()
        cfg = build(TrainConfig, tiny_config_dict(accum_grad=opts["accum_grad"], grad_clip=1e9, log_interval=10 ** 6))
        torch.manual_seed(0)
        ctx = DistContext(rank=rank, world_size=world)
        model = wrap_ddp(build_model(cfg, 80, Vocabulary.of_size(10)), ctx, find_unused_parameters=False)
        optimizer = build_optimizer(cfg, model.parameters())
        executor = Executor(cfg, model, optimizer, build_scheduler(cfg, optimizer), ctx, Path(out_dir),
                            progress=False)
        gen = torch.Generator().manual_seed(rank)
        n = (opts["warmup"] + opts["steps"]) * opts["accum_grad"]
        batches = [random_batch(gen, opts["batch"], max_frames=opts["frames"]) for _ in range(n)]
        stamps: list[float] = []
        counts: list[int] = []

        def on_step(state):
            stamps.append(time.perf_counter())
            counts.append(counter["n"])
            return False

        dist.barrier()
        executor.train_epoch(batches, TrainState(), on_step=on_step)
        w = opts["warmup"]
        per_step = [b - a for a, b in zip(stamps[w - 1:], stamps[w:])]
        per_step_collectives = [b - a for a, b in zip(counts[w - 1:], counts[w:])]
        result = {"ms_per_step": 1000 * statistics.median(per_step),
                  "collectives_per_step": statistics.mean(per_step_collectives)}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--accum_grad", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--frames", type=int, default=40)
    args = p.parse_args(argv)
    if args.procs < 2 or args.warmup < 1 or args.steps < 1 or args.accum_grad < 1:
        print("error: need --procs >= 2, --warmup >= 1, --steps >= 1, --accum_grad >= 1", file=sys.stderr)
        return 2
    opts = {k: getattr(args, k) for k in ("accum_grad", "steps", "warmup", "batch", "frames")}
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(worker, args=(args.procs, free_port(), opts, out), nprocs=args.procs, join=True)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(args.procs)]
    print(json.dumps({"ranks": args.procs, "accum_grad": args.accum_grad, "cpu_count": os.cpu_count(),
                      "ms_per_step": round(max(r["ms_per_step"] for r in ranks), 2),
                      "collectives_per_step": max(r["collectives_per_step"] for r in ranks)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
