"""Stage c of the GPU check: the AISHELL-size conformer (the AISHELL recipe's
``examples/aishell/s0/conf/train_conformer.yaml``: 46.2 M parameters, 4,233 units) on
synthetic utterances with AISHELL-1's durations (``aishell_data``), through the recipe's
feature pipeline (speed perturbation, fbank, SpecAugment) and dynamic batches
(``--max_frames`` per batch), built by ``build_training`` and stepped by the executor.

Per precision (bf16, fp16, tf32, fp32; most wanted first): steady-state real frames/s and
utterances/s (after ``--warmup`` optimizer steps, over ``--steps`` more), the share of that
time spent waiting for the loader, the rate without those waits, and the peak GPU memory.
Then the bf16 rate and data-wait share with other loader worker counts, one profiler
summary table of bf16 training steps, and the encoder's matmuls against ``torch.matmul`` on
the same shapes (``aishell_profile``).

    python -m bench.gpu_stages.aishell --out DIR --seconds 100 [--cpu_dry_run]
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch

from asrkit.train.build import build_training
from asrkit.train.dist import DistContext
from bench.gpu_stages import aishell_profile
from bench.gpu_stages.aishell_data import make_set
from bench.gpu_stages.common import (PRECISIONS, MeasuredLoader, StageRecord, StepMarks, device_for, load_cfg,
                                     free_memory, make_executor, mark, stage_args, train_steps)

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples/aishell/s0/conf/train_conformer.yaml"
ORDER = ("bf16", "fp16", "tf32", "fp32")
DRY_RUN_ORDER = ("bf16", "fp32")  # (the same code for every precision; fp16's scaler runs in the digits stage)
# the dry run's model: the recipe's config made tiny (the 4,233 units stay), one micro-batch a step
DRY_RUN_OVERRIDES = ["accum_grad=1", "encoder_conf.output_size=32", "encoder_conf.attention_heads=2", "encoder_conf.linear_units=64",
                     "encoder_conf.num_blocks=1", "decoder_conf.attention_heads=2", "decoder_conf.linear_units=64",
                     "decoder_conf.num_blocks=1"]


def default_workers() -> int:
    """Loader workers for the GPU machine's cores: all but two (the trainer and the system)."""
    return min(14, max(1, (os.cpu_count() or 2) - 2))


def config_overrides(data, max_frames: int, workers: int, dry_run: bool) -> list[str]:
    return [f"tokenizer_conf.symbol_table_path={data.units}", f"cmvn_conf.cmvn_file={data.cmvn}",
            "dataset_conf.batch_conf.batch_type=dynamic", f"dataset_conf.batch_conf.max_frames_in_batch={max_frames}",
            f"dataset_conf.num_workers={workers}", "dataset_conf.shuffle_conf.shuffle_size=200",
            "dataset_conf.sort_conf.sort_size=100", "log_interval=1000",
            *(DRY_RUN_OVERRIDES if dry_run else [])]


def build(data, overrides: list[str], precision_name: str, device: torch.device, work: Path):
    precision = PRECISIONS[precision_name]
    precision.apply()
    cfg = load_cfg(CONFIG, [*overrides, f"dtype={precision.dtype}"])
    ctx = DistContext(device=device)
    parts = build_training(cfg, ctx, train_data=str(data.data_list), ddp=False)
    loader = MeasuredLoader(parts.train_loader)
    return parts, loader, make_executor(parts, ctx, work / precision_name, precision)


def measure(data, overrides: list[str], precision_name: str, device: torch.device, warmup: int, steps: int,
            deadline: float, work: Path, model_wrapper=None) -> dict:
    """Steady-state rates of ``steps`` optimizer steps after ``warmup`` (fewer when the
    deadline comes first: ``steps`` in the result says how many were timed)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    parts, loader, executor = build(data, overrides, precision_name, device, work)
    built = time.perf_counter() - start
    if model_wrapper is not None:
        executor.model = model_wrapper(parts.model)
    marks = StepMarks()
    started = time.perf_counter()

    def on_step(state):
        if state.step >= warmup:
            mark(marks, state.step, loader, device)

    state = train_steps(executor, loader, warmup + steps, deadline, on_step)
    result = {"build_seconds": round(built, 2), "steps_total": state.step,
              "params_M": round(sum(p.numel() for p in parts.bare_model.parameters()) / 1e6, 2)}
    if warmup in marks.at:  # the warm-up: first batches, allocator growth, a compile
        result["warmup_seconds"] = round(marks.at[warmup]["time"] - started, 2)
    last = max(marks.at) if marks.at else None
    if last is not None and last > warmup:
        span = marks.span(warmup, last)
        compute = span["seconds"] * (1 - span["data_wait_share"])
        span["real_frames_per_s_without_waits"] = round(span["real_frames"] / max(compute, 1e-9), 1)
        result.update(span)
    else:
        result["error"] = f"no steady state: {state.step} step(s) before the deadline (warm-up {warmup})"
    if device.type == "cuda":
        result["peak_memory_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    result["sample"] = (parts, loader, executor)  # for the profiler; dropped by release()
    return result


def release(result: dict, device: torch.device) -> dict:
    result.pop("sample", None)
    free_memory(device)
    return result


def main(argv=None) -> int:
    p = stage_args(__doc__.splitlines()[0])
    p.add_argument("--utterances", type=int, default=600)
    p.add_argument("--max_frames", type=int, default=32000, help="dataset_conf.batch_conf.max_frames_in_batch")
    p.add_argument("--workers", type=int, default=default_workers())
    p.add_argument("--worker_sweep", default="2,4,8", help="other loader worker counts to time in bf16")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    dry = args.cpu_dry_run
    record = StageRecord(args.out, "aishell")
    end = time.perf_counter() + args.seconds
    device = device_for(dry)
    work = args.out / "aishell_work"
    t0 = time.perf_counter()
    data = make_set(work / "data", 24 if dry else args.utterances, duration_scale=0.25 if dry else 1.0,
                    config=CONFIG)
    workers = 0 if dry else args.workers
    max_frames = 800 if dry else args.max_frames
    warmup, steps = (1, 2) if dry else (args.warmup, args.steps)
    record.record("setup", {"config": str(CONFIG), "data": data.describe(), "max_frames_in_batch": max_frames,
                            "workers": workers, "warmup_steps": warmup, "timed_steps": steps,
                            "accum_grad": load_cfg(CONFIG, []).accum_grad, "device": str(device),
                            "data_seconds": round(time.perf_counter() - t0, 2)})
    overrides = config_overrides(data, max_frames, workers, dry)
    rates = {}
    for i, name in enumerate(DRY_RUN_ORDER if dry else ORDER):
        share = (end - time.perf_counter()) * (0.5 if i == 0 else 0.3) if not dry else 60
        result = measure(data, overrides, name, device, warmup, steps, time.perf_counter() + share, work)
        if name == "bf16":
            parts, loader, executor = result["sample"]
            try:
                record.record("profile", aishell_profile.run(executor, loader, parts, device, args.out, dry))
            except Exception as e:  # a profiler failure must not lose the rates
                record.record("profile", {"error": f"{type(e).__name__}: {e}"})
            del parts, loader, executor  # (its model and loader workers must not outlive the run)
        rates[name] = release(result, device)
        record.record(name, rates[name])
    sweep = {}
    for n in ([1] if dry else [int(x) for x in args.worker_sweep.split(",") if x and int(x) != workers]):
        if end - time.perf_counter() < 10 and not dry:
            sweep[n] = {"skipped": "stage time budget"}
            continue
        o = config_overrides(data, max_frames, n, dry)
        sweep[n] = release(measure(data, o, "bf16", device, warmup, steps, min(end, time.perf_counter() + 30), work),
                           device)
        record.record("bf16_workers", sweep)
    record.summary(summary_line(rates, workers))
    record.finish()
    return 0


def summary_line(rates: dict, workers: int) -> str:
    parts = []
    for name in [n for n in ORDER if n in rates]:
        r = rates[name]
        if "real_frames_per_s" in r:
            mem = f", {r['peak_memory_GiB']} GiB" if "peak_memory_GiB" in r else ""
            parts.append(f"{name} {r['real_frames_per_s']:.0f} fr/s ({r['utts_per_s']:.1f} utt/s, "
                         f"wait {100 * r['data_wait_share']:.0f} %{mem})")
        else:
            parts.append(f"{name} {r.get('error', 'not measured')}")
    return f"aishell  {workers} workers: " + " | ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
