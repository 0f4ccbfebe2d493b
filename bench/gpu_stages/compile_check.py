"""Stage c2 of the GPU check: ``torch.compile`` on and off for the AISHELL-size conformer in
bf16 (stage c's data, model and batches).  The encoder is compiled (``dynamic=True``: every
batch has another length), the rest runs eagerly; compiling the whole model would take
much of the check's minutes.  Reported: the compiled run's warm-up seconds (the compile
happens there) and its steady-state rate, then the eager rate measured the same way, if
time is left.  The dry run compiles with the ``eager`` backend (dynamo's tracing without
code generation: no C++ compiler on the CPU path).

    python -m bench.gpu_stages.compile_check --out DIR --seconds 60 [--cpu_dry_run]
"""
from __future__ import annotations

import logging
import time

import torch

from asrkit.train.dist import unwrap
from bench.gpu_stages import aishell
from bench.gpu_stages.aishell_data import existing_set, make_set
from bench.gpu_stages.common import StageRecord, device_for, stage_args


def compiled_encoder(backend: str):
    def wrap(model):
        bare = unwrap(model)
        bare.encoder = torch.compile(bare.encoder, dynamic=True, backend=backend)
        return model
    return wrap


def main(argv=None) -> int:
    p = stage_args(__doc__.splitlines()[0])
    p.add_argument("--max_frames", type=int, default=128000)
    p.add_argument("--accum_grad", type=int, default=1)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    dry = args.cpu_dry_run
    record = StageRecord(args.out, "compile")
    end = time.perf_counter() + args.seconds
    device = device_for(dry)
    work = args.out / "aishell_work"
    data = existing_set(work / "data") or make_set(work / "data", 24 if dry else 600,
                                                   duration_scale=0.25 if dry else 1.0, config=aishell.CONFIG)
    variant = (aishell.Variant("bf16", "bf16", 800, 1, 0) if dry else
               aishell.Variant("bf16", "bf16", args.max_frames, args.accum_grad, args.workers))
    overrides = aishell.config_overrides(data, variant, dry)
    warmup, steps = (1, 1) if dry else (args.warmup, args.steps)
    backend = "eager" if dry else "inductor"
    record.record("setup", {"compiled": "encoder", "backend": backend, "dynamic": True, "precision": "bf16",
                            "max_frames": variant.max_frames, "accum_grad": variant.accum, "workers": variant.workers,
                            "warmup_steps": warmup, "timed_steps": steps})
    results = {}
    for name, wrapper in (("compiled", compiled_encoder(backend)), ("eager", None)):
        if end - time.perf_counter() < (5 if dry else 15):
            results[name] = {"skipped": "stage time budget"}
            break
        try:
            results[name] = aishell.release(aishell.measure(data, overrides, "bf16", device, warmup, steps, end, work,
                                                            model_wrapper=wrapper), device)
        except Exception as e:  # a compiler failure is a result, not the end of the check
            results[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        record.record(name, results[name])
    c, e = results.get("compiled", {}), results.get("eager", {})
    if "real_frames_per_s" in c and "real_frames_per_s" in e:
        results["speedup"] = round(c["real_frames_per_s"] / e["real_frames_per_s"], 3)
        record.record("speedup", results["speedup"])
    record.summary(summary_line(results, backend))
    record.finish()
    return 0


def summary_line(results: dict, backend: str) -> str:
    def rate(r: dict) -> str:
        if "real_frames_per_s" in r:
            return f"{r['real_frames_per_s']:.0f} fr/s (warm-up {r.get('warmup_seconds', '?')} s)"
        return r.get("error") or r.get("skipped") or "not measured"
    line = f"compile  bf16 encoder, {backend}: compiled {rate(results.get('compiled', {}))} | eager {rate(results.get('eager', {}))}"
    return line + (f" | speed-up x{results['speedup']}" if "speedup" in results else "")


if __name__ == "__main__":
    raise SystemExit(main())
