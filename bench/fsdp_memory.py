#!/usr/bin/env python3
"""Per-rank memory and step time of DDP against FSDP (zero2, zero3), with and without
activation checkpointing, for the AISHELL-size conformer and a ~4x larger one.

    python bench/fsdp_memory.py [--models aishell large] [--engines ddp zero2 zero3] \\
        [--checkpointing off on] [--ranks 2 4] [--steps 3 --warmup 1] [--batch 4 --frames 400] \\
        [--limit_model large --limit_mb 3600] [--json OUT.json] [--markdown OUT.md]

Each configuration is one ``torchrun --nproc_per_node R`` job running this file in worker
mode (gloo, CPU, fp32, one thread per process).  A worker builds the model with asrkit's
``build_model`` from ``conf/train_conformer.yaml`` (``large``: ``output_size`` 512, 8 heads,
``linear_units`` 4096 in encoder and decoder), wraps it with the training engine asrkit's
trainer uses (``asrkit.train.engines.build_engine``: ``torch_ddp``, or ``torch_fsdp`` with
the strategy), builds the optimizer (Adam) with ``asrkit.train.scheduler.build_optimizer``
and trains ``--warmup`` + ``--steps`` optimizer steps on one synthetic batch (``--batch``
utterances of ``--frames`` 80-dim frames, 20 tokens each, from a fixed seed), each step as
the executor makes it: forward and backward under the engine's gradient sync, the engine's
gradient norm, the optimizer step.  Per rank it reports (bytes this rank holds: a DTensor's
local shard):

* ``params``, ``grads`` (after a backward), ``optimizer`` (Adam's state after a step);
* ``peak_rss``: the process's peak resident memory (``ru_maxrss``), and ``base_rss``, its
  resident memory before the model was built (the interpreter, torch, gloo);
* ``step_s``: median wall seconds per timed step (2 ranks; with 4 ranks on a 2-core machine
  the time means nothing and only memory is reported).

``--limit_model M --limit_mb N`` then runs model M under DDP and under FSDP zero3 on 2 ranks
with each rank's address space limited to N MiB above what it had mapped once the process
group was up (``RLIMIT_AS``: this machine's memory cgroup belongs to the sandbox running
it, so no ``memory.max`` is set): the job that needs more fails to allocate.  Given without
``--limit_model``, ``--limit_mb`` limits every run of the grid the same way (a safety net on a
shared machine: a run that needs more is reported as failed instead of exhausting its memory).
Results and commands: ``docs/experiments/fsdp_memory.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "aishell": [],
    "large": ["encoder_conf.output_size=512", "encoder_conf.attention_heads=8", "encoder_conf.linear_units=4096",
              "decoder_conf.attention_heads=8", "decoder_conf.linear_units=4096"],
}
ENGINES = {"ddp": ["train_engine=torch_ddp"],
           "zero2": ["train_engine=torch_fsdp", "fsdp_sharding_strategy=zero2"],
           "zero3": ["train_engine=torch_fsdp", "fsdp_sharding_strategy=zero3"]}
VOCAB = 4233  # AISHELL-1's units


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def worker(args) -> int:
    import torch

    from asrkit.config import load_config
    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    from asrkit.train.dist import init_distributed, resolve_launch, shutdown
    from asrkit.train.engines import build_engine
    from asrkit.train.scheduler import build_optimizer

    torch.set_num_threads(1)
    overrides = [*MODELS[args.model], *ENGINES[args.engine], "dtype=fp32", "encoder_conf.dropout_rate=0.0",
                 f"encoder_conf.gradient_checkpointing={args.checkpointing == 'on'}",
                 f"decoder_conf.gradient_checkpointing={args.checkpointing == 'on'}"]
    cfg = load_config(REPO / "conf" / "train_conformer.yaml", overrides)
    ctx = init_distributed(resolve_launch(cfg.launch, dist_backend="gloo"), timeout_s=900)
    base_rss = _status_kb("VmRSS") * 1024
    if args.limit_mb:
        mapped = _status_kb("VmSize") * 1024
        limit = mapped + args.limit_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = {"model": args.model, "engine": args.engine, "checkpointing": args.checkpointing,
              "ranks": ctx.world_size, "rank": ctx.rank}
    try:
        torch.manual_seed(0)
        model = build_model(cfg, 80, Vocabulary.of_size(VOCAB), load_cmvn_stats=False)
        result["parameters"] = sum(p.numel() for p in model.parameters())
        engine = build_engine(cfg, ctx)
        model = engine.wrap(model)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_optimizer(cfg, params)
        gen = torch.Generator().manual_seed(1 + ctx.rank)
        feats = torch.randn(args.batch, args.frames, 80, generator=gen)
        lengths = torch.full((args.batch,), args.frames, dtype=torch.long)
        target = torch.randint(3, VOCAB - 1, (args.batch, 20), generator=gen)
        target_lengths = torch.full((args.batch,), 20, dtype=torch.long)
        times = []
        for step in range(args.warmup + args.steps):
            start = time.perf_counter()
            with engine.gradient_sync(model, sync=True):
                model(feats, lengths, target, target_lengths)["loss"].backward()
            engine.gradient_norm(params, ctx.device)
            if step == 0:
                result["grads"] = _local_bytes(p.grad for p in params if p.grad is not None)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
        result["params"] = _local_bytes(params)
        result["optimizer"] = _local_bytes(v for s in optimizer.state.values() for v in s.values()
                                           if torch.is_tensor(v))
        result["step_s"] = statistics.median(times[args.warmup:]) if len(times) > args.warmup else None
        result["ok"] = True
    except (RuntimeError, MemoryError) as e:  # (an allocation refused under --limit_mb)
        result.update(ok=False, error=str(e).splitlines()[0][:200])
    result["base_rss"] = base_rss
    result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT " + json.dumps(result), flush=True)
    if not result["ok"]:
        os._exit(3)  # (a rank that failed leaves its peers in a collective: the agent ends them)
    shutdown()
    return 0


def run_job(args, model: str, engine: str, checkpointing: str, ranks: int, limit_mb: int = 0,
            steps: int = 0) -> list[dict]:
    port = 29600 + (os.getpid() % 1000)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr",
           "127.0.0.1", "--master_port", str(port), str(Path(__file__).resolve()), "--worker", "--model", model,
           "--engine", engine, "--checkpointing", checkpointing, "--batch", str(args.batch), "--frames",
           str(args.frames), "--steps", str(steps), "--warmup", str(args.warmup), "--limit_mb", str(limit_mb)]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    rows = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if not rows:
        rows = [{"model": model, "engine": engine, "checkpointing": checkpointing, "ranks": ranks, "rank": 0,
                 "ok": False, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}]
    print(json.dumps(rows[0]), file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict], limited: list[dict]) -> str:
    mb = lambda b: f"{b / 2**20:.0f}" if b is not None else "-"
    out = ["| model (parameters) | engine | activation ckpt | ranks | params MiB | grads MiB | optimizer MiB | "
           "peak RSS MiB (base) | step s |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r["rank"] != 0:
            continue
        if not r.get("ok"):
            out.append(f"| {r['model']} | {r['engine']} | {r['checkpointing']} | {r['ranks']} | failed: "
                       f"{r.get('error', '')} | | | | |")
            continue
        step = f"{r['step_s']:.2f}" if r.get("step_s") and r["ranks"] == 2 else "-"
        out.append(f"| {r['model']} ({r['parameters'] / 1e6:.1f} M) | {r['engine']} | {r['checkpointing']} | "
                   f"{r['ranks']} | {mb(r['params'])} | {mb(r['grads'])} | {mb(r['optimizer'])} | "
                   f"{mb(r['peak_rss'])} ({mb(r['base_rss'])}) | {step} |")
    if limited:
        out += ["", "| per-rank limit | engine | result | peak RSS MiB |", "| --- | --- | --- | ---: |"]
        for r in limited:
            if r["rank"] == 0:
                result = "trained" if r.get("ok") else "failed: " + r.get("error", "")
                out.append(f"| {r.get('limit_mb')} MiB above the mapped start | {r['engine']} | {result} | "
                           f"{mb(r.get('peak_rss'))} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    p.add_argument("--checkpointing", nargs="+", default=["off", "on"], choices=["off", "on"])
    p.add_argument("--ranks", nargs="*", type=int, default=[2, 4], help="none: only the --limit_model run")
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps (2 ranks; 4 ranks: none)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--frames", type=int, default=400)
    p.add_argument("--limit_model", choices=list(MODELS), default=None)
    p.add_argument("--limit_mb", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="aishell", help=argparse.SUPPRESS)
    p.add_argument("--engine", default="ddp", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        args.checkpointing = args.checkpointing[0] if isinstance(args.checkpointing, list) else args.checkpointing
        return worker(args)
    rows = []
    for model in args.models:
        for ranks in args.ranks:
            for engine in args.engines:
                for ckpt in args.checkpointing:
                    rows += run_job(args, model, engine, ckpt, ranks, steps=args.steps if ranks == 2 else 0)
    limited = []
    if args.limit_model:
        for engine in ("ddp", "zero3"):
            for r in run_job(args, args.limit_model, engine, "off", 2, limit_mb=args.limit_mb, steps=1):
                limited.append({**r, "limit_mb": args.limit_mb})
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    report = {"cpu": cpu, "cores": os.cpu_count(), "argv": sys.argv[1:], "rows": rows, "limited": limited}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    table = markdown(rows, limited)
    if args.markdown:
        Path(args.markdown).write_text(f"CPU: {cpu}, {os.cpu_count()} cores; fp32, gloo, 1 thread per process\n\n"
                                       + table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
