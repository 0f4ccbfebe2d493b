#!/usr/bin/env python3
"""Data-parallel scaling on CPU: N gloo processes x T threads against 1 process x T.

    python bench/ddp_scaling.py --config conf/train_conformer_small.yaml \\
        --data data/train/data.list --units data/dict/units.txt --cmvn data/train/global_cmvn \\
        [--procs 1 2 --threads 1 --steps 12 --warmup 3 --bucket_cap_mb 25 --gradient_as_bucket_view]

The driver launches ``torchrun --nproc_per_node N`` of this same file in worker mode for
each N in ``--procs``.  Every worker builds the real pipeline (``bench/pipeline.py``:
sharded loader with workers, model, Adam), wraps the model in DistributedDataParallel
(gloo; the options above are DDP's), and times ``--steps`` optimizer steps after
``--warmup``; then, to separate communication from computation, the same number of
steps again inside ``model.no_sync()`` (no gradient all-reduce; the optimizer still
steps).  Real frames are summed over ranks, wall time is the slowest rank's.

Reported per N: global real frames/s, scaling efficiency ``fps(N) / (N · fps(1))``, the
all-reduce overhead ``1 − t(no_sync) / t(sync)`` -- how much of a step the gradient
communication costs beyond what overlapping it with the backward hides -- and the FLOP share:
the FLOPs of one training step per real frame (torch's FlopCounterMode, forward + backward,
``bench/train_throughput.py``'s count) times the global real frames/s, over the summed matmul
peak of the N processes, each measuring a 1024-square matmul at its thread count and in the
run's precision at the same time (so the peak is the machine's with all N busy).  A JSON line
per N is printed (``--json`` appends them to a file).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.pipeline import add_pipeline_args, build_pipeline, matmul_peak
from bench.train_throughput import step_flops_per_frame


def timed_steps(pipe, steps: int, sync: bool) -> tuple[float, int]:
    """Seconds and real frames for ``steps`` optimizer steps (data loading included)."""
    import contextlib
    frames = 0
    start = time.perf_counter()
    for _ in range(steps):
        batch = pipe.next_batch()
        with (contextlib.nullcontext() if sync else pipe.model.no_sync()):
            pipe.forward_backward(batch)
        pipe.optimizer_step()
        frames += int(batch["feats_lengths"].sum())
    return time.perf_counter() - start, frames


def worker(args) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads)
    pipe = build_pipeline(args, rank=rank, world_size=world)
    pipe.model = DistributedDataParallel(pipe.model, bucket_cap_mb=args.bucket_cap_mb,
                                         gradient_as_bucket_view=args.gradient_as_bucket_view)
    timed_steps(pipe, args.warmup, sync=True)
    results = []
    for sync in (True, False):
        dist.barrier()
        seconds, frames = timed_steps(pipe, args.steps, sync)
        t = torch.tensor([seconds, float(frames)], dtype=torch.float64)
        slowest = t.clone()
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        results.append((float(slowest[0]), float(t[1])))
    with pipe.model.no_sync():  # counted on each rank's own batch, no all-reduce
        _, flops_per_frame = step_flops_per_frame(pipe, pipe.next_batch())
    dist.barrier()
    peak = torch.tensor([matmul_peak(args.threads, dtype=pipe.cfg.dtype)], dtype=torch.float64)
    dist.all_reduce(peak, op=dist.ReduceOp.SUM)
    if rank == 0:
        (sync_s, frames), (nosync_s, frames_nosync) = results
        print(json.dumps({"procs": world, "threads": args.threads, "steps": args.steps,
                          "real_frames_per_s": frames / sync_s,
                          "real_frames_per_s_no_sync": frames_nosync / nosync_s,
                          "step_s": sync_s / args.steps, "step_s_no_sync": nosync_s / args.steps,
                          "train_flops_per_frame": flops_per_frame, "dtype": pipe.cfg.dtype,
                          "matmul_peak_GFLOPs": float(peak[0]),
                          "share_of_peak": frames / sync_s * flops_per_frame / (float(peak[0]) * 1e9),
                          "bucket_cap_mb": args.bucket_cap_mb,
                          "gradient_as_bucket_view": args.gradient_as_bucket_view}), flush=True)
    # DDP's reducer goes before the process group it holds: destroying the group under a live
    # DDP model aborted a rank at exit ("terminate called without an active exception") in
    # about one run in three here
    del pipe
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def driver(args, argv: list[str]) -> int:
    rows = []
    for n in args.procs:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
               str(Path(__file__).resolve()), "--worker", *argv]
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(proc.stderr[-4000:], file=sys.stderr)
            return proc.returncode or 1
        rows.append(json.loads(lines[-1]))
    base = next((r["real_frames_per_s"] / r["procs"] for r in rows if r["procs"] == 1), None)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    for r in rows:
        r["machine"] = machine
        r["efficiency"] = r["real_frames_per_s"] / (r["procs"] * base) if base else None
        r["allreduce_overhead"] = 1 - r["step_s_no_sync"] / r["step_s"]
        eff = f"{100 * r['efficiency']:.0f}%" if r["efficiency"] is not None else "n/a"
        print(f"{r['procs']} proc x {r['threads']} thread(s): {r['real_frames_per_s']:.0f} real frames/s, "
              f"scaling efficiency {eff}, step {r['step_s']:.2f} s "
              f"({r['step_s_no_sync']:.2f} s without all-reduce: overhead "
              f"{100 * r['allreduce_overhead']:.1f}%); {r['train_flops_per_frame'] / 1e6:.1f} MFLOP per frame, "
              f"{r['dtype']} matmul peak {r['matmul_peak_GFLOPs']:.0f} GFLOP/s over the processes -> "
              f"{100 * r['share_of_peak']:.1f}% of peak", file=sys.stderr)
        print(json.dumps(r))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_args(p)
    p.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket_cap_mb", type=float, default=25.0)
    p.add_argument("--gradient_as_bucket_view", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return driver(args, [a for a in argv if a != "--worker"])


if __name__ == "__main__":
    sys.exit(main())
