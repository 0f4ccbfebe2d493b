#!/usr/bin/env python3
"""Training throughput of a config on this machine, data loading included.

    python bench/train_throughput.py --config conf/train_conformer_small.yaml \
        --data data/train/data.list --units data/dict/units.txt --cmvn data/train/global_cmvn \
        [--steps 30 --warmup 5 --threads 2 --num_workers 1 --override k=v ...]

Runs the real pipeline (loader with workers -> model -> backward -> clip -> Adam step),
timing each phase with wall clocks, and reports:

* real frames/s: unpadded 10 ms fbank frames trained per second, end to end;
* utterances/s, padding share, the share of time waiting for data;
* the time split: data wait, forward, backward, optimizer (clip + step + zero_grad);
* the model's FLOPs per real frame of one training step (forward and backward, counted by
  torch's FlopCounterMode) and the share of the machine's matmul peak that reaches -- the
  peak of a 1024-square matmul measured in the same run at the same thread count and in
  the run's precision (``--override dtype=bf16`` trains under bf16 autocast, as the trainer).

``--profile N`` additionally runs N more steps under ``torch.profiler`` and prints the
self CPU time per operator category (convolution, matmul, softmax (attention and the losses'
log-softmax), ctc, dropout masks, norms, elementwise, memory (copies, layout, reductions),
other) and the top operators -- where the step time goes.

A JSON line with every figure is printed last (``--json`` writes it to a file too), with
the counts the rates come from: ``real_frames`` and ``utterances`` trained in the
``seconds`` timed.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.pipeline import add_pipeline_args, build_pipeline, matmul_peak


def step_flops_per_frame(pipe, batch) -> tuple[float, float]:
    """(forward, forward + backward) FLOPs per real frame of ``batch``, counted by torch's
    FlopCounterMode over one training step (the gradients are discarded)."""
    from torch.utils.flop_counter import FlopCounterMode
    frames = float(batch["feats_lengths"].sum())
    counter = FlopCounterMode(display=False)
    with counter:
        out = pipe.forward(batch)
    forward = counter.get_total_flops()
    with counter:  # (entering resets the count: this one is the backward alone)
        (out["loss"] / batch["feats_lengths"].numel()).backward()
    pipe.optimizer.zero_grad(set_to_none=True)
    return forward / frames, (forward + counter.get_total_flops()) / frames


# operator name fragments -> category, first match wins (self CPU time of aten ops)
CATEGORIES = [
    ("convolution", ("conv", "mkldnn")),
    ("matmul", ("addmm", "::mm", "bmm", "matmul", "linear")),
    ("softmax", ("softmax",)),
    ("ctc", ("ctc",)),
    ("dropout masks", ("uniform", "bernoulli", "random_")),
    ("norms", ("layer_norm", "batch_norm")),
    ("elementwise", ("add", "mul", "sub", "div", "silu", "sigmoid", "glu", "relu", "threshold",
                     "where", "masked_fill", "exp", "log", "neg", "pow", "sqrt", "gt", "lt", "eq", "ne")),
    ("memory", ("copy_", "clone", "contiguous", "cat", "empty", "zero", "fill", "index", "gather",
                "scatter", "pad", "stack", "to", "sum", "mean", "max", "_foreach")),
]


def categorise(name: str) -> str:
    for category, fragments in CATEGORIES:
        if any(f in name for f in fragments):
            return category
    return "other"


def profile_steps(step_fn, steps: int) -> dict:
    """Run ``step_fn`` ``steps`` times under the profiler; self CPU seconds per category
    and the 15 most expensive operators."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step_fn()
    by_cat: dict[str, float] = {}
    ops = []
    for ev in prof.key_averages():
        if not ev.key.startswith("aten::"):
            continue
        seconds = ev.self_cpu_time_total / 1e6
        by_cat[categorise(ev.key)] = by_cat.get(categorise(ev.key), 0.0) + seconds
        ops.append((seconds, ev.key, ev.count))
    total = sum(by_cat.values()) or 1.0
    ops.sort(reverse=True)
    return {"category_share": {k: v / total for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
            "top_ops": [{"op": k, "share": s / total, "calls": n} for s, k, n in ops[:15]]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_args(p)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile N more steps by operator")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    pipe = build_pipeline(args)
    model = pipe.model
    peak = matmul_peak(args.threads, dtype=pipe.cfg.dtype)

    t = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    frames = padded = utts = steps = 0
    flops = None
    mark = time.perf_counter()
    total_start = None

    def train_step(batch):
        pipe.forward_backward(batch)
        pipe.optimizer_step()

    while steps < args.warmup + args.steps:
        batch = pipe.next_batch()
        if steps == args.warmup:
            for k in t:
                t[k] = 0.0
            frames = padded = utts = 0
            total_start = mark
        now = time.perf_counter()
        t["data"] += now - mark
        out = pipe.forward(batch)
        t1 = time.perf_counter()
        (out["loss"] / batch["feats_lengths"].numel()).backward()
        t2 = time.perf_counter()
        pipe.optimizer_step()
        t3 = time.perf_counter()
        t["forward"] += t1 - now
        t["backward"] += t2 - t1
        t["optimizer"] += t3 - t2
        frames += int(batch["feats_lengths"].sum())
        padded += batch["feats"].shape[0] * batch["feats"].shape[1]
        utts += batch["feats_lengths"].numel()
        steps += 1
        if flops is None:
            flops, train_flops = step_flops_per_frame(pipe, batch)
        mark = time.perf_counter()
    wall = mark - total_start
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}, "
                   f"CPU capability {torch.backends.cpu.get_cpu_capability()}", "dtype": pipe.cfg.dtype,
        "config": args.config, "overrides": args.override, "steps": args.steps,
        "real_frames": frames, "utterances": utts, "seconds": wall,
        "real_frames_per_s": frames / wall, "utts_per_s": utts / wall,
        "padding_share": 1 - frames / max(padded, 1), "data_wait_share": t["data"] / wall,
        "split": {k: v / wall for k, v in t.items()},
        "params_M": sum(q.numel() for q in model.parameters()) / 1e6,
        "fwd_MFLOP_per_frame": flops / 1e6, "train_MFLOP_per_frame": train_flops / 1e6,
        "matmul_peak_GFLOPs": peak,
        "share_of_peak": frames / wall * train_flops / (peak * 1e9),
    }
    print(f"{result['real_frames_per_s']:.0f} real frames/s, {result['utts_per_s']:.1f} utts/s, "
          f"padding {100 * result['padding_share']:.1f}%, data wait {100 * result['data_wait_share']:.1f}%",
          file=sys.stderr)
    print("split: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in result["split"].items()), file=sys.stderr)
    print(f"{result['params_M']:.2f} M params, {result['train_MFLOP_per_frame']:.1f} MFLOP/frame (train), "
          f"{pipe.cfg.dtype} matmul peak {peak:.0f} GFLOP/s -> {100 * result['share_of_peak']:.1f}% of peak",
          file=sys.stderr)
    if args.profile:
        result["profile"] = profile_steps(lambda: train_step(pipe.next_batch()), args.profile)
        print("profile (self CPU time): " + ", ".join(
            f"{k} {100 * v:.1f}%" for k, v in result["profile"]["category_share"].items()), file=sys.stderr)
        for op in result["profile"]["top_ops"]:
            print(f"  {100 * op['share']:5.1f}%  {op['op']} x{op['calls']}", file=sys.stderr)
    line = json.dumps(result)
    print(line)
    if args.json:
        Path(args.json).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
