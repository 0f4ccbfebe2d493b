"""Profiling of stage c: one summary table of training steps (text, written to
``profile_bf16.txt``), and the encoder's matmuls against ``torch.matmul`` on the same shapes.

Encoder matmuls: the encoder's forward and backward (``AsrModel.encode`` under the run's
autocast) on one real batch, profiled with shapes; every ``aten::mm``/``addmm``/``bmm``
grouped by input shapes with its device time (CPU time in the dry run).  Each shape is
then timed alone as ``torch.matmul`` of random tensors in the compute dtype (autocast's
dtype, else fp32), as many calls as the model made.  ``isolated_share`` = isolated time /
in-model time: 1.0 means the model's matmuls run as fast as the bare ones (target >= 0.7)."""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from asrkit.train.dist import unwrap
from bench.gpu_stages.common import train_steps

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")
TABLE_ROWS = 30


def _time_attr(events) -> str:
    sample = next(iter(events), None)
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if sample is not None and hasattr(sample, name):
            return name
    return "self_device_time_total"


def _self_time_us(ev, device: torch.device, attr: str) -> float:
    return float(getattr(ev, attr, 0.0)) if device.type == "cuda" else float(ev.self_cpu_time_total)


def summary_table(executor, loader, device: torch.device, steps: int, path: Path) -> dict:
    """Profile ``steps`` more optimizer steps; the operator table goes to ``path``."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        train_steps(executor, loader, steps, time.perf_counter() + 120)
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.key_averages()
    sort = _time_attr(events) if device.type == "cuda" else "self_cpu_time_total"
    table = events.table(sort_by=sort, row_limit=TABLE_ROWS, max_name_column_width=60)
    path.write_text(table, encoding="utf-8")
    return {"table": path.name, "sorted_by": sort, "steps": steps}


def _matmul_args(op: str, shapes: list) -> list[tuple[int, ...]] | None:
    """The two operand shapes of a profiled matmul (addmm's first input is the bias)."""
    operands = shapes[1:3] if op == "aten::addmm" else shapes[:2]
    if len(operands) != 2 or not all(operands):
        return None
    return [tuple(s) for s in operands]


def encoder_matmuls(model, batch: dict, autocast_dtype, device: torch.device) -> list[dict]:
    """``[{op, shapes, calls, us}]`` of the encoder's forward + backward on ``batch``."""
    feats = batch["feats"].to(device)
    lens = batch["feats_lengths"].to(device)
    amp = (torch.autocast(device_type=device.type, dtype=autocast_dtype) if autocast_dtype is not None
           else contextlib.nullcontext())
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    model.zero_grad(set_to_none=True)
    with profile(activities=activities, record_shapes=True) as prof:
        with amp:
            out, _ = model.encode(feats, lens)
        out.float().square().mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    events = prof.key_averages(group_by_input_shape=True)
    attr = _time_attr(events)
    found = []
    for ev in events:
        if ev.key in MATMULS and (args := _matmul_args(ev.key, ev.input_shapes)) is not None:
            found.append({"op": ev.key, "shapes": args, "calls": ev.count, "us": _self_time_us(ev, device, attr)})
    return found


def isolated_matmul_us(shapes: list[tuple[int, ...]], calls: int, dtype: torch.dtype, device: torch.device) -> float:
    """Microseconds of ``calls`` calls of ``torch.matmul`` on random operands of ``shapes``."""
    a = torch.randn(shapes[0], device=device, dtype=dtype)
    b = torch.randn(shapes[1], device=device, dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b)
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            torch.matmul(a, b)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1000.0
    t = time.perf_counter()
    for _ in range(calls):
        torch.matmul(a, b)
    return (time.perf_counter() - t) * 1e6


def matmul_comparison(model, batch: dict, autocast_dtype, device: torch.device) -> dict:
    found = encoder_matmuls(model, batch, autocast_dtype, device)
    dtype = autocast_dtype or torch.float32
    rows, model_us, alone_us = [], 0.0, 0.0
    for m in found:
        alone = isolated_matmul_us(m["shapes"], m["calls"], dtype, device)
        model_us += m["us"]
        alone_us += alone
        rows.append({**m, "isolated_us": round(alone, 1), "us": round(m["us"], 1),
                     "share": round(alone / m["us"], 3) if m["us"] else None})
    rows.sort(key=lambda r: -r["us"])
    return {"dtype": str(dtype).replace("torch.", ""), "shapes": len(rows), "encoder_matmul_us": round(model_us, 1),
            "isolated_matmul_us": round(alone_us, 1),
            "isolated_share": round(alone_us / model_us, 3) if model_us else None, "top": rows[:12]}


def run(executor, loader, parts, device: torch.device, out: Path, dry_run: bool) -> dict:
    """The summary table of a few bf16 steps and the matmul comparison on one batch."""
    result = {"summary": summary_table(executor, loader, device, 1 if dry_run else 2, out / "profile_bf16.txt")}
    loader.set_epoch(0)
    batch = next(iter(loader))
    model = unwrap(parts.model)
    result["encoder_matmuls"] = matmul_comparison(model, batch, executor.autocast_dtype, device)
    return result
