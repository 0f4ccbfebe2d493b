"""Stage c of the GPU check: the AISHELL-size conformer (the AISHELL recipe's
``examples/aishell/s0/conf/train_conformer.yaml``: 46.2 M parameters, 4,233 units) on
synthetic utterances with AISHELL-1's durations (``aishell_data``), through the recipe's
feature pipeline (speed perturbation, fbank, SpecAugment) and its shuffle and sort
windows, in dynamic batches, built by ``build_training`` and stepped by the executor.

Measured (``plan``), most wanted first: per precision (bf16, fp16, tf32, fp32) with
``--max_frames`` per micro-batch and ``accum_grad`` set so that an optimizer step sees what
the recipe's does; then the recipe's own micro-batch (``--recipe_frames`` x its
``accum_grad``) in bf16 and fp32, other loader worker counts, and the trainer on two
intra-op threads.  Each: steady-state real frames/s and utterances/s (after ``--warmup``
optimizer steps, over ``--steps`` more), the padding share, the share of the time spent
waiting for the loader, the rate without those waits, and the peak GPU memory.  After the
first: one profiler summary table and the encoder's matmuls against ``torch.matmul`` on the
same shapes (``aishell_profile``).

    python -m bench.gpu_stages.aishell --out DIR --seconds 100 [--cpu_dry_run]
"""
from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Optional

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
# the dry run's model: the recipe's config made tiny (the 4,233 units stay), one micro-batch a step
DRY_RUN_OVERRIDES = ["accum_grad=1", "encoder_conf.output_size=32", "encoder_conf.attention_heads=2", "encoder_conf.linear_units=64",
                     "encoder_conf.num_blocks=1", "decoder_conf.attention_heads=2", "decoder_conf.linear_units=64",
                     "decoder_conf.num_blocks=1"]


@dataclasses.dataclass(frozen=True)
class Variant:
    """One measured setting: precision, frames per micro-batch, ``accum_grad``, loader
    workers and the trainer's intra-op threads (None: torch's default)."""

    name: str
    precision: str
    max_frames: int
    accum: int
    workers: int
    threads: Optional[int] = None


def plan(max_frames: int, recipe_frames: int, workers: int, sweep: list[int], dry: bool) -> list[Variant]:
    """What is measured, most wanted first.  The headline per precision uses ``max_frames``
    per micro-batch and ``accum_grad`` chosen so that an optimizer step sees what the recipe's
    does (``recipe_frames`` x the recipe's ``accum_grad``); then the recipe's own micro-batch,
    other loader worker counts and two trainer threads, in bf16."""
    recipe_accum = load_cfg(CONFIG, []).accum_grad
    if dry:
        return [Variant("bf16", "bf16", 800, 1, 0), Variant("fp32", "fp32", 800, 1, 0),
                Variant("bf16_workers1", "bf16", 800, 1, 1, threads=1)]
    accum = max(1, round(recipe_frames * recipe_accum / max_frames))
    out = [Variant(name, name, max_frames, accum, workers) for name in ORDER]
    out += [Variant("bf16_recipe_batch", "bf16", recipe_frames, recipe_accum, workers),
            Variant("fp32_recipe_batch", "fp32", recipe_frames, recipe_accum, workers)]
    out += [Variant(f"bf16_workers{n}", "bf16", max_frames, accum, n) for n in sweep if n != workers]
    out.append(Variant("bf16_threads2", "bf16", max_frames, accum, workers, threads=2))
    return out


def config_overrides(data, v: Variant, dry_run: bool, batch_type: str = "dynamic") -> list[str]:
    return [f"tokenizer_conf.symbol_table_path={data.units}", f"cmvn_conf.cmvn_file={data.cmvn}",
            f"dataset_conf.batch_conf.batch_type={batch_type}", f"dataset_conf.batch_conf.max_frames_in_batch={v.max_frames}",
            f"dataset_conf.num_workers={v.workers}", "log_interval=1000",
            *(DRY_RUN_OVERRIDES if dry_run else [f"accum_grad={v.accum}"])]


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
    p.add_argument("--utterances", type=int, default=3000)
    p.add_argument("--distinct_audio", type=int, default=600, help="audio files written (the utterances cycle over them)")
    p.add_argument("--max_frames", type=int, default=128000, help="frames per micro-batch of the headline rates")
    p.add_argument("--recipe_frames", type=int, default=32000, help="the recipe-sized micro-batch compared")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--worker_sweep", default="4,14", help="other loader worker counts to time in bf16")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--each_s", type=float, default=16.0, help="at most this long per measurement after the first")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    dry = args.cpu_dry_run
    record = StageRecord(args.out, "aishell")
    end = time.perf_counter() + args.seconds
    device = device_for(dry)
    work = args.out / "aishell_work"
    t0 = time.perf_counter()
    data = make_set(work / "data", 24 if dry else args.utterances, duration_scale=0.25 if dry else 1.0,
                    config=CONFIG, distinct=None if dry else args.distinct_audio)
    warmup, steps = (1, 2) if dry else (args.warmup, args.steps)
    variants = plan(args.max_frames, args.recipe_frames, args.workers,
                    [int(x) for x in args.worker_sweep.split(",") if x], dry)
    record.record("setup", {"config": str(CONFIG), "data": data.describe(), "warmup_steps": warmup,
                            "timed_steps": steps, "recipe_accum_grad": load_cfg(CONFIG, []).accum_grad,
                            "variants": [dataclasses.asdict(v) for v in variants], "device": str(device),
                            "data_seconds": round(time.perf_counter() - t0, 2)})
    rates = {}
    default_threads = torch.get_num_threads()
    for i, v in enumerate(variants):
        left = end - time.perf_counter()
        if left < 8 and not dry:
            rates[v.name] = {"skipped": "stage time budget"}
            record.record(v.name, rates[v.name])
            continue
        share = 60 if dry else min(left, left * 0.4 if i == 0 else args.each_s)
        torch.set_num_threads(v.threads or default_threads)
        result = measure(data, config_overrides(data, v, dry), v.precision, device, warmup, steps,
                         time.perf_counter() + share, work)
        result.update(variant=dataclasses.asdict(v), trainer_threads=torch.get_num_threads())
        torch.set_num_threads(default_threads)
        if i == 0:
            parts, loader, executor = result["sample"]
            try:
                record.record("profile", aishell_profile.run(executor, loader, parts, device, args.out, dry))
            except Exception as e:  # a profiler failure must not lose the rates
                record.record("profile", {"error": f"{type(e).__name__}: {e}"})
            del parts, loader, executor  # (its model and loader workers must not outlive the run)
        rates[v.name] = release(result, device)
        record.record(v.name, rates[v.name])
    record.summary(summary_line(rates, variants))
    record.finish()
    return 0


def summary_line(rates: dict, variants: list[Variant]) -> str:
    parts = []
    for v in variants:
        r = rates.get(v.name, {})
        setting = f"{v.max_frames // 1000}k x{v.accum} w{v.workers}" + (f" t{v.threads}" if v.threads else "")
        if "real_frames_per_s" in r:
            mem = f", {r['peak_memory_GiB']} GiB" if "peak_memory_GiB" in r else ""
            parts.append(f"{v.name} [{setting}] {r['real_frames_per_s']:.0f} fr/s "
                         f"(wait {100 * r['data_wait_share']:.0f} %{mem})")
        else:
            parts.append(f"{v.name} [{setting}] {r.get('error') or r.get('skipped') or 'not measured'}")
    return "aishell  " + " | ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
