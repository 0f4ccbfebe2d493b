"""Stage c0 of the GPU check (issue 57): a REAL FIRST EPOCH of the AISHELL-size conformer,
every batch shape new to the process, per variant, and the AISHELL-1 epoch projected
from it.  Each variant runs in a fresh process (no kernel choice, cuDNN graph or compile
carried over from another), from the model's build through epoch 0 of the stage's
synthetic set (``aishell_data``: AISHELL-1's durations, the recipe's pipeline) and then
on into epoch 1 (shapes met before) until its time is up.  Variants, most wanted first:

* ``bf16_bucket``: ``batch_type: bucket_frames`` (bounded shapes) with asrkit's defaults
  (``cudnn_sdpa: false``: torch's cuDNN attention off);
* ``bf16_bucket_no_cudnn``: the same with ``torch.backends.cudnn.enabled = False`` (what is
  left of the new-shape cost once cuDNN attention is off: cuDNN's convolutions?);
* ``tf32_bucket``: TF32 on the same batches;
* by name (``--variants``; measured on 2026-11-30, docs/experiments/gpu_check_h200.md):
  ``bf16_bucket_cudnn_sdpa`` (``cudnn_sdpa: true``, torch's default from 2.9 on sm90/sm100,
  which builds a cuDNN graph per new shape), ``bf16_dynamic`` (the old ``dynamic`` batches:
  nearly every batch a new shape), ``bf16_bucket_sdpa_avoid_recompile``
  (``TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1`` with cuDNN attention allowed; read once per
  process by torch, hence the process per variant), ``bf16_bucket_compile_blocks``
  (``compile_blocks: true``, its warm-up inside the epoch; ``--compile_cache``: the
  inductor cache folder).

Per variant: the first epoch's real frames/s (build excluded, everything after it
included), its batches, distinct shapes and padding; compute seconds per step on shapes
met for the first time against shapes met before; host syncs per step (CUDA); the
projected AISHELL-1 epoch (``54,000,000 real frames / the first epoch's rate``) and the
modelled one (the full epoch's planned batches and shapes: ``54,000,000 / rate on seen
shapes + shapes x (new-shape step - seen-shape step)``); ``cudnn.benchmark`` as run
(asrkit leaves torch's default, off).

    python -m bench.gpu_stages.first_epoch --out DIR --seconds 280 [--cpu_dry_run]
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from asrkit.train.compile import compile_blocks
from bench.bucket_plan import aishell_list, plan_figures
from bench.gpu_stages import aishell
from bench.gpu_stages.aishell_data import existing_set, make_set
from bench.gpu_stages.common import (SyncCount, StageRecord, device_for, free_memory,
                                     recording_warnings, stage_args, train_steps)
from bench.gpu_stages.process import run_with_deadline
from asrkit.train.counters import TrainState

AISHELL_FRAMES = 150 * 360_000  # AISHELL-1's real frames (the check's projection)
CHILD_STARTUP_S = 15.0  # a variant's process: imports, CUDA start, the build


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    precision: str = "bf16"
    batch_type: str = "bucket_frames"
    cudnn_sdpa: bool = False        # the config key (asrkit's default: off)
    cudnn: bool = True              # torch.backends.cudnn.enabled
    env: tuple = ()                 # (name, value) pairs for the variant's process
    compile_blocks: bool = False
    share: float = 1.0              # of the per-variant time


# the default run: a full AISHELL-1-size first epoch for bf16 and TF32 (their shares), the
# cuDNN-off probe cut short; the others by name
VARIANTS = (Variant("bf16_bucket", share=1.15), Variant("bf16_bucket_no_cudnn", cudnn=False, share=0.55),
            Variant("tf32_bucket", precision="tf32", share=1.3),
            Variant("bf16_bucket_cudnn_sdpa", cudnn_sdpa=True), Variant("bf16_dynamic", batch_type="dynamic"),
            Variant("bf16_bucket_sdpa_avoid_recompile", cudnn_sdpa=True,
                    env=(("TORCH_CUDNN_SDPA_AVOID_RECOMPILE", "1"),)),
            Variant("bf16_bucket_compile_blocks", compile_blocks=True, share=1.6))
DEFAULT_VARIANTS = ("bf16_bucket", "bf16_bucket_no_cudnn", "tf32_bucket")
BY_NAME = {v.name: v for v in VARIANTS}
# the dry run: the first in a process of its own, the second in the stage's (the other
# variants differ by CUDA-only switches; compile_blocks' loss: tests/train/test_compile_blocks.py)
DRY_RUN_VARIANTS = ("bf16_bucket", "bf16_dynamic")


def overrides(data, v: Variant, max_frames: int, workers: int, dry: bool) -> list[str]:
    base = aishell.Variant(v.name, v.precision, max_frames, 1, workers)
    out = aishell.config_overrides(data, base, dry, batch_type=v.batch_type) + [
        "accum_grad=1", f"cudnn_sdpa={str(v.cudnn_sdpa).lower()}"]
    if dry:  # (the dry run's 24 utterances: two buckets give full batches)
        out.append("dataset_conf.batch_conf.num_buckets=2")
    return out + (["compile_blocks=true"] if v.compile_blocks and not dry else [])


def step_times(marks: list[dict], shapes: list[tuple], sizes: list[tuple]) -> dict:
    """Compute seconds per optimizer step (wall minus the loader wait), split by whether the
    step's batch shape was met before in this process (one micro-batch a step: step k
    trained the loader's batch k, whose shape and real frames the loader kept)."""
    new, seen, met = [], [], set()
    for k in range(1, len(marks)):
        if k - 1 >= len(shapes):
            break
        a, b = marks[k - 1], marks[k]
        seconds = (b["time"] - a["time"]) - (b["wait"] - a["wait"])
        frames = sizes[k - 1][0]
        (seen if shapes[k - 1] in met else new).append((seconds, frames))
        met.add(shapes[k - 1])

    def mean(xs):
        return round(statistics.fmean(s for s, _ in xs), 4) if xs else None
    out = {"new_shape_steps": len(new), "seen_shape_steps": len(seen), "new_shape_step_s": mean(new),
           "seen_shape_step_s": mean(seen)}
    if new and seen:
        out["new_over_seen"] = round(out["new_shape_step_s"] / out["seen_shape_step_s"], 3)
    if seen and sum(s for s, _ in seen) > 0:
        out["seen_shape_frames_per_s"] = round(sum(f for _, f in seen) / sum(s for s, _ in seen), 1)
    return out


def run_variant(v: Variant, data, args) -> dict:
    """One variant in this process: build, epoch 0 timed, epoch 1 until the deadline."""
    dry = args.cpu_dry_run
    device = device_for(dry)
    deadline = time.perf_counter() + args.seconds
    torch.backends.cudnn.enabled = v.cudnn  # (cuDNN attention: the config's cudnn_sdpa, set by the build)
    if v.compile_blocks and args.compile_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(args.compile_cache).resolve())
    start = time.perf_counter()
    parts, loader, executor = aishell.build(data, overrides(data, v, args.max_frames, args.workers, dry),
                                            v.precision, device, args.out / "first_epoch_work" / v.name)
    built = time.perf_counter() - start
    deadline = max(deadline, time.perf_counter() + (30 if dry else 3))  # (at least a step after the build)
    if dry and v.compile_blocks:  # (the dry run: the blocks traced by dynamo, no code generation)
        compile_blocks(parts.bare_model, backend="eager")
    marks: list[dict] = []
    epoch_end: dict = {}

    def snap() -> dict:
        if device.type == "cuda":
            torch.cuda.synchronize()
        return {"time": time.perf_counter(), **loader.counters()}

    def on_step(state):
        marks.append({**snap(), "epoch": state.epoch})

    with recording_warnings() as caught:
        syncs = SyncCount(caught, device)
        marks.append({**snap(), "epoch": 0})
        syncs.start(0)
        state = TrainState()
        try:
            state = train_steps(executor, loader, 10**9 if not dry else 4, deadline, on_step)
        except KeyboardInterrupt:  # cut off by the stage's deadline: report the steps made
            state.step, state.epoch = len(marks) - 1, marks[-1]["epoch"]
        syncs.stop(state.step)
    first = [m for m in marks[1:] if m["epoch"] == 0]
    if first:
        seconds = first[-1]["time"] - marks[0]["time"]
        real, padded = (sum(x) for x in zip(*loader.sizes[:len(first)]))
        epoch_end = {"steps": len(first), "seconds": round(seconds, 2), "real_frames": real,
                     "real_frames_per_s": round(real / max(seconds, 1e-9), 1),
                     "padding_share": round(1 - real / max(padded, 1), 4),
                     "data_wait_share": round(first[-1]["wait"] / max(seconds, 1e-9), 4),
                     # the wait for the first batch (the workers' start) apart from the rest
                     "first_batch_wait_s": round(first[0]["wait"] - marks[0]["wait"], 2),
                     "complete": state.epoch > 0, "distinct_shapes": len(set(loader.shapes[:len(first)]))}
    result = {"variant": dataclasses.asdict(v), "build_seconds": round(built, 2), "first_epoch": epoch_end,
              "steps_total": state.step, "distinct_shapes_total": len(set(loader.shapes)),
              "steps": step_times(marks, loader.shapes, loader.sizes), "host_syncs": syncs.report(),
              "cudnn_benchmark": torch.backends.cudnn.benchmark, "cudnn_sdpa": torch.backends.cuda.cudnn_sdp_enabled(),
              "cudnn": torch.backends.cudnn.enabled,
              "env": dict(v.env), "torch": torch.__version__}
    if device.type == "cuda":
        result["peak_memory_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    del parts, loader, executor
    free_memory(device)
    return result


def full_epoch_plan(batch_type: str, max_frames: int) -> dict:
    """Batches, distinct shapes and padding of one AISHELL-1 epoch on one GPU (bench.bucket_plan)."""
    seconds, tokens = aishell_list(120_098)
    st = plan_figures(batch_type, seconds, tokens, world=1, max_frames=max_frames)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in st.items()}


def projections(r: dict, plan: dict) -> dict:
    out = {}
    rate = r.get("first_epoch", {}).get("real_frames_per_s")
    if rate:
        out["epoch_s_from_first_epoch_rate"] = round(AISHELL_FRAMES / rate, 1)
    st = r.get("steps", {})
    if st.get("seen_shape_frames_per_s") and st.get("new_shape_step_s") is not None:
        extra = max(st["new_shape_step_s"] - st["seen_shape_step_s"], 0.0)
        out["epoch_s_modelled"] = round(AISHELL_FRAMES / st["seen_shape_frames_per_s"] + plan["shapes"] * extra, 1)
    return out


def main(argv=None) -> int:
    p = stage_args(__doc__.splitlines()[0])
    p.add_argument("--utterances", type=int, default=120_098, help="the synthetic set (one first epoch; "
                   "AISHELL-1's count: 150 h, 454 batches, 6.75 s of data on the H200)")
    p.add_argument("--distinct_audio", type=int, default=600)
    p.add_argument("--max_frames", type=int, default=128000)
    p.add_argument("--workers", type=int, default=12, help="loader workers (8 left 9.6 %% data wait at "
                   "bf16's 625,000 frames/s on the H200's 16 cores)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    p.add_argument("--compile_cache", default=None, help="TORCHINDUCTOR_CACHE_DIR for the compile variant")
    p.add_argument("--variant", default=None, help="(internal) run this one variant in this process")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    dry = args.cpu_dry_run
    data_dir = args.out / "first_epoch_work" / "data"
    if args.variant:  # a child: one variant, its result as JSON
        result = run_variant(BY_NAME[args.variant], existing_set(data_dir), args)
        (args.out / f"first_epoch_{args.variant}.json").write_text(json.dumps(result, indent=1, default=str))
        return 0
    record = StageRecord(args.out, "first_epoch")
    end = time.perf_counter() + args.seconds
    t0 = time.perf_counter()
    data = existing_set(data_dir) or make_set(data_dir, 24 if dry else args.utterances,
                                              duration_scale=0.25 if dry else 1.0, config=aishell.CONFIG,
                                              distinct=None if dry else args.distinct_audio)
    plans = {bt: full_epoch_plan(bt, args.max_frames) for bt in ("bucket_frames", "dynamic")}
    wanted = [BY_NAME[n] for n in (DRY_RUN_VARIANTS if dry else args.variants.split(",")) if n]
    record.record("setup", {"data": data.describe(), "max_frames": args.max_frames, "workers": args.workers,
                            "aishell1_epoch_plan_one_gpu": plans, "data_seconds": round(time.perf_counter() - t0, 2),
                            "torch": torch.__version__, "variants": [v.name for v in wanted]})
    results = {}
    for i, v in enumerate(wanted):
        left = end - time.perf_counter()
        share = left * v.share / sum(w.share for w in wanted[i:])
        if share < 20 and not dry:
            results[v.name] = {"skipped": f"stage time budget ({left:.0f} s left)"}
            record.record(v.name, results[v.name])
            continue
        # each in a process of its own (the dry run: the first only, the rest here, for the time)
        if not dry or i == 0:
            cmd = [sys.executable, "-m", "bench.gpu_stages.first_epoch", "--out", str(args.out), "--variant", v.name,
                   "--seconds", f"{max(share - CHILD_STARTUP_S, 5):.0f}", "--max_frames", str(args.max_frames),
                   "--workers", str(args.workers), *(["--cpu_dry_run"] if dry else []),
                   *(["--compile_cache", args.compile_cache] if args.compile_cache else [])]
            done = run_with_deadline(cmd, share + (60 if dry else 0), args.out / f"first_epoch_{v.name}.log",
                                     env={**os.environ, **dict(v.env)})
            path = args.out / f"first_epoch_{v.name}.json"
            r = (json.loads(path.read_text()) if path.is_file() else
                 {"error": f"exit {done.returncode}{' (cut off)' if done.timed_out else ''}: see first_epoch_{v.name}.log"})
            r["process_seconds"] = done.seconds
        else:
            args.seconds = share
            r = run_variant(v, data, args)
        r["projection"] = projections(r, plans[v.batch_type])
        results[v.name] = r
        record.record(v.name, r)
    record.summary(summary_line(results, plans))
    record.finish()
    return 0


def summary_line(results: dict, plans: dict) -> str:
    parts = []
    for name, r in results.items():
        fe, st, pr = r.get("first_epoch") or {}, r.get("steps") or {}, r.get("projection") or {}
        if not fe:
            parts.append(f"{name}: {r.get('error') or r.get('skipped') or 'no first epoch'}")
            continue
        syncs = (r.get("host_syncs") or {}).get("syncs_per_step")
        parts.append(f"{name}: {fe['real_frames_per_s']:.0f} fr/s over {fe['steps']} steps"
                     f"{'' if fe.get('complete') else ' (epoch cut)'}, {fe['distinct_shapes']} shapes, "
                     f"padding {100 * fe['padding_share']:.0f} %, step new/seen {st.get('new_shape_step_s')}/"
                     f"{st.get('seen_shape_step_s')} s, syncs/step {syncs}, AISHELL-1 epoch "
                     f"{pr.get('epoch_s_from_first_epoch_rate')} s (modelled {pr.get('epoch_s_modelled')} s)")
    plan = "; ".join(f"{bt}: {p['batches']} batches, {p['shapes']} shapes, padding {100 * p['frame_padding']:.1f} %"
                     for bt, p in plans.items())
    return f"first_epoch  AISHELL-1 plan on one GPU: {plan} | " + " | ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
