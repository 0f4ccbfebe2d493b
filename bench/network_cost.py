#!/usr/bin/env python3
"""The cost of the network: DDP training of the small conformer over namespaced hosts whose
link is shaped (tools/netns_hosts.py), with each gradient communication hook.

    python bench/network_cost.py [--rates 10gbit 1gbit 100mbit] [--hooks none fp16 powersgd] \\
        [--steps 8 --warmup 2 --batch 8] [--cv_steps 40 --cv_rate 10gbit] [--loopback_hooks none] \\
        [--json docs/experiments/network_cost.json --markdown docs/experiments/network_cost.md]

Needs root, ``ip`` and ``tc`` (network namespaces).  The driver synthesizes a digits corpus
into ``--work`` (cached), then runs, each with the recipe's torchrun command
(``tools/recipe_stages.sh`` stage_train: ``--nnodes --nproc_per_node --node_rank
--master_addr --master_port --rdzv_conf timeout= --max_restarts 0``) launching this file in
worker mode instead of ``-m asrkit.bin.train``:

* ``alone``: one host, one process (no all-reduce): the reference step time;
* ``loopback``: one host × 2 processes, gloo over the host's ``lo`` (``--loopback_hooks``);
* per ``--rates`` value and ``--hooks`` value: 2 hosts × 1 process, gloo over ``eth0``,
  the link shaped to that rate by ``tbf`` (both directions); at ``--cv_rate`` the runs time
  ``--cv_steps`` steps (when given) and their CV losses are compared (the loss does not
  depend on the link: every run starts from the same weights and sees the same batches).

Each worker builds the run with asrkit's ``build_training`` (the DDP wrap and the
``ddp_conf.comm_hook`` registration that ``asrkit.bin.train`` does) and trains with asrkit's
``Executor``: ``--warmup`` steps, then ``--steps`` timed optimizer steps (static batches of
``--batch`` utterances per rank, 1 thread per process).  Then the CV loss, a timed
all-reduce of a buffer the gradient's size, and ``--steps`` steps under ``no_sync`` (no
gradient all-reduce).  Measured per run (rank 0's JSON line):

* ``step_s``: wall seconds per optimizer step (data, forward, backward, all-reduce, step);
* ``allreduce_share`` = 1 − step_s(no_sync) / step_s: what the gradient communication adds
  to a step beyond what overlapping it with the backward hides;
* ``tx_bytes_per_step``: bytes this rank's interface transmitted per timed step, read from
  ``/sys/class/net/<iface>/statistics/tx_bytes`` inside the namespace (frames on the wire:
  gloo's payload plus TCP/IP headers; on ``lo`` the count of both ranks, halved);
* ``allreduce_MBps``: the gradient's fp32 bytes / seconds of one all-reduce of them, and
  ``wire_MBps``: transmitted bytes per second during those all-reduces -- bandwidth actually
  achieved, whichever limits it (the shaper, or the 2 cores copying and summing);
* ``efficiency`` (driver) = throughput / (world size × throughput alone) = step_s(alone) /
  step_s, as every rank trains batches of the same size.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

DEFAULT_WORK = Path("/tmp/ak_network_cost")
PORT = 29500


# ----------------------------------------------------------------------------- worker


def _tx_bytes(iface: str) -> int:
    return int(Path(f"/sys/class/net/{iface}/statistics/tx_bytes").read_text())


def worker(a) -> None:
    """One rank: train, measure, print rank 0's JSON line (see the module docstring)."""
    import torch
    import torch.distributed as dist

    from asrkit.config import load_config
    from asrkit.train import dist as D
    from asrkit.train.build import build_training
    from asrkit.train.dist.comm_hooks import bytes_per_element, wire_elements
    from asrkit.train.executor import Executor, TrainState

    torch.set_num_threads(1)
    cfg = load_config(a.config, a.override)
    spec = D.resolve_launch(cfg.launch)
    ctx = D.init_distributed(spec, timeout_s=cfg.launch.timeout_s)
    model_dir = Path(a.model_dir)
    parts = build_training(cfg, ctx, train_data=a.train_data, cv_data=a.cv_data, cache_dir=model_dir)
    executor = Executor(parts.train_cfg, parts.model, parts.optimizer, parts.scheduler, ctx, model_dir,
                        progress=False)
    state, marks, last = TrainState(), {}, a.warmup + a.steps

    def on_step(s) -> bool:
        if s.step in (a.warmup, last):
            marks[s.step] = (time.perf_counter(), _tx_bytes(a.iface))
        return s.step >= last

    epoch = 0
    while state.step < last:
        parts.train_loader.set_epoch(epoch)
        executor.train_epoch(parts.train_loader, state, on_step)
        epoch += 1
    (t0, tx0), (t1, tx1) = marks[a.warmup], marks[last]
    step_s = (t1 - t0) / a.steps
    cv_loss = executor.cv(parts.cv_loader)["loss"] if parts.cv_loader is not None else None

    shapes = [tuple(p.shape) for p in parts.bare_model.parameters()]
    n = sum(p.numel() for p in parts.bare_model.parameters())
    row = {"hook": cfg.ddp_conf.comm_hook, "world": ctx.world_size, "nodes": ctx.world_size // spec.local_world_size,
           "steps": a.steps, "warmup": a.warmup, "batch_per_rank": a.batch, "step_s": step_s, "cv_loss": cv_loss, "grad_elements": n,
           "tx_bytes_per_step": (tx1 - tx0) / a.steps / spec.local_world_size}
    if ctx.distributed:
        full, sent = wire_elements(shapes, cfg.ddp_conf)
        row["payload_bytes_per_step"] = sent * bytes_per_element(cfg.ddp_conf.comm_hook)
        buf = torch.zeros(n)
        dist.all_reduce(buf)
        dist.barrier()
        tx, t = _tx_bytes(a.iface), time.perf_counter()
        for _ in range(3):
            dist.all_reduce(buf)
        seconds, wire = (time.perf_counter() - t) / 3, (_tx_bytes(a.iface) - tx) / 3 / spec.local_world_size
        row.update(allreduce_s=seconds, allreduce_MBps=4 * n / seconds / 1e6, wire_MBps=wire / seconds / 1e6)
        row["step_s_no_sync"] = _no_sync_step_s(parts, a.steps)  # (last: the replicas diverge)
        row["allreduce_share"] = 1 - row["step_s_no_sync"] / step_s
    if ctx.rank == 0:
        print(json.dumps(row), flush=True)
    # DDP's reducer goes before the process group it holds (bench/ddp_scaling.py saw aborts otherwise)
    del executor, parts
    gc.collect()
    if ctx.distributed:
        dist.barrier()
    D.shutdown()


def _no_sync_step_s(parts, steps: int) -> float:
    """Seconds per step of forward, backward (no gradient all-reduce), clip and optimizer."""
    import torch

    def batches():
        for epoch in range(1000, 2000):  # (epochs the timed training never reached)
            parts.train_loader.set_epoch(epoch)
            yield from parts.train_loader

    batches = batches()
    params = [p for p in parts.model.parameters() if p.requires_grad]
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        with parts.model.no_sync():
            out = parts.model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
            out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        parts.optimizer.step()
        parts.optimizer.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / steps


# ----------------------------------------------------------------------------- driver


def prepare_data(work: Path, train: int, dev: int, config: str) -> dict:
    """A digits corpus in ``work`` (synthesized once), its units and CMVN."""
    corpus = work / f"corpus_{train}_{dev}"
    py = sys.executable

    def tool(*argv):
        subprocess.run([py, str(REPO / "tools" / argv[0]), *map(str, argv[1:])], check=True, capture_output=True)

    tool("synthesize_corpus.py", "--out", corpus, "--train", train, "--dev", dev, "--test", 1, "--seed", 7)
    for split in ("train", "dev"):
        if not (corpus / split / "data.list").is_file():
            tool("make_raw_list.py", corpus / split / "wav.scp", corpus / split / "text", corpus / split / "data.list")
    units, cmvn = corpus / "units.txt", corpus / "global_cmvn"
    if not units.is_file():
        tool("make_units.py", corpus / "train" / "text", units)
    if not cmvn.is_file():
        tool("compute_cmvn_stats.py", "--train_config", config, "--data_list", corpus / "train" / "data.list",
             "--out_cmvn", cmvn)
    return {"train": corpus / "train" / "data.list", "dev": corpus / "dev" / "data.list", "units": units,
            "cmvn": cmvn}


def torchrun(nodes: int, nproc: int, node_rank: int, master_addr: str, port: int, timeout_s: int) -> list[str]:
    """The recipe's torchrun launch (tools/recipe_stages.sh stage_train, static rendezvous)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc_per_node", str(nproc),
            "--node_rank", str(node_rank), "--master_addr", master_addr, "--master_port", str(port),
            "--rdzv_conf", f"timeout={timeout_s}", "--max_restarts", "0"]


class Runner:
    """Runs one measured job on the namespaced hosts and returns rank 0's row."""

    def __init__(self, args, hosts, data: dict):
        self.args, self.hosts, self.data, self.count = args, hosts, data, 0

    def overrides(self, hook: str, steps: int) -> list[str]:
        a, d = self.args, self.data
        return [f"tokenizer_conf.symbol_table_path={d['units']}", "cmvn=global_cmvn",
                f"cmvn_conf.cmvn_file={d['cmvn']}", "dataset_conf.batch_conf.batch_type=static",
                f"dataset_conf.batch_conf.batch_size={a.batch}", "dataset_conf.num_workers=0",
                f"scheduler_conf.warmup_steps={max(1, steps)}", f"ddp_conf.comm_hook={hook}",
                f"ddp_conf.powersgd_rank={a.powersgd_rank}", "ddp_conf.powersgd_start_iter=2",
                f"launch.timeout_s={a.timeout}", *a.override]

    def run(self, setting: str, hook: str, nodes: int, nproc: int, steps: int) -> dict:
        a = self.args
        self.count += 1
        iface = "lo" if nodes == 1 else "eth0"
        master = "127.0.0.1" if nodes == 1 else self.hosts.hosts[0].addr
        model_dir = a.work / "runs" / f"{self.count:02d}_{setting}_{hook}"
        worker_argv = [str(Path(__file__).resolve()), "--worker", "--config", a.config, "--iface", iface,
                       "--train_data", str(self.data["train"]), "--cv_data", str(self.data["dev"]),
                       "--model_dir", str(model_dir), "--steps", str(steps), "--warmup", str(a.warmup),
                       "--batch", str(a.batch)]
        for o in self.overrides(hook, a.warmup + steps):
            worker_argv += ["--override", o]
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=iface)
        procs = [self.hosts.hosts[i].popen(torchrun(nodes, nproc, i, master, PORT + self.count, a.timeout)
                                           + worker_argv, env=env, cwd=str(REPO), stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True) for i in range(nodes)]
        outs = []
        deadline = time.monotonic() + a.timeout
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for host in self.hosts.hosts:
                    host.kill_started()
                raise SystemExit(f"network_cost: {setting}/{hook} did not finish within {a.timeout} s")
        rows = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
        if any(p.returncode for p in procs) or not rows:
            sys.stderr.write("\n".join(err[-3000:] for _, err in outs) + "\n")
            raise SystemExit(f"network_cost: {setting}/{hook} failed (exit {[p.returncode for p in procs]})")
        row = dict(rows[0], setting=setting)
        print(f"{setting:>9} {hook:>8}: step {row['step_s']:.3f} s"
              + (f", all-reduce share {100 * row['allreduce_share']:.0f}%, {row['tx_bytes_per_step'] / 1e6:.2f} MB "
                 f"sent per step, all-reduce {row['allreduce_MBps']:.0f} MB/s" if "allreduce_share" in row else "")
              + (f", CV loss {row['cv_loss']:.3f}" if row.get("cv_loss") is not None else ""), file=sys.stderr,
              flush=True)
        return row


def measure(args) -> dict:
    """Every run of the module docstring; returns {"rows": [...], "cv": [...], ...}."""
    from tools import netns_hosts
    ok, why = netns_hosts.netns_available()
    if not ok:
        raise SystemExit(f"network_cost: network namespaces unavailable: {why}")
    data = prepare_data(args.work, args.train_utts, args.dev_utts, args.config)
    rows, cv = [], []
    with netns_hosts.Hosts(2) as hosts:
        runner = Runner(args, hosts, data)
        alone = runner.run("alone", "none", 1, 1, args.steps) if args.alone else None
        rows += [runner.run("loopback", hook, 1, 2, args.steps) for hook in args.loopback_hooks]
        for rate in args.rates:
            hosts.set_rate(rate)
            steps = args.cv_steps if args.cv_steps and rate == args.cv_rate else args.steps
            rows += [runner.run(rate, hook, 2, 1, steps) for hook in args.hooks]
    if args.cv_steps:
        cv = [row for row in rows if row["setting"] == args.cv_rate]
    for row in rows:
        row["efficiency"] = alone["step_s"] / row["step_s"] if alone else None
    return {"alone": alone, "rows": rows, "cv": cv}


def markdown(result: dict, command: str, machine: str, note: str = "") -> str:
    """docs/experiments/network_cost.md: title, command, machine, ``note``, the tables."""
    alone = result["alone"]
    lines = ["# The cost of the network: measured output of bench/network_cost.py", "",
             "What the columns mean and what to conclude: [docs/distributed.md](../distributed.md), "
             "\"Gradient compression\"; raw figures: `network_cost.json` next to this file.", "",
             f"Command: `{command}`", "", f"Machine: {machine}", ""] + ([note, ""] if note else [])
    if alone:
        lines += [f"One process alone: {alone['step_s']:.3f} s per step ({alone['batch_per_rank']} utterances).", ""]
    lines += ["| link | hook | step (s) | all-reduce share | efficiency | sent per step per rank (MB) | "
              "payload (MB) | all-reduce of the gradient: MB/s | on the wire: MB/s |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        eff = f"{100 * r['efficiency']:.0f} %" if r.get("efficiency") else "n/a"
        lines.append(f"| {r['setting']} | {r['hook']} | {r['step_s']:.3f} | {100 * r['allreduce_share']:.0f} % | {eff} "
                     f"| {r['tx_bytes_per_step'] / 1e6:.2f} | {r['payload_bytes_per_step'] / 1e6:.2f} "
                     f"| {r['allreduce_MBps']:.0f} | {r['wire_MBps']:.0f} |")
    if result["cv"]:
        ref = next((r["cv_loss"] for r in result["cv"] if r["hook"] == "none"), None)
        lines += ["", f"CV loss after {result['cv'][0]['steps'] + result['cv'][0]['warmup']} steps "
                      f"({result['cv'][0]['setting']} runs):", "", "| hook | CV loss | vs none | step (s) |",
                  "| --- | ---: | ---: | ---: |"]
        for r in result["cv"]:
            rel = f"{100 * (r['cv_loss'] / ref - 1):+.2f} %" if ref else "n/a"
            lines.append(f"| {r['hook']} | {r['cv_loss']:.4f} | {rel} | {r['step_s']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "conf" / "train_conformer_small.yaml"))
    p.add_argument("--override", action="append", default=[], help="config edit for every run")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK, help="corpus cache and run folders")
    p.add_argument("--train_utts", type=int, default=240)
    p.add_argument("--dev_utts", type=int, default=24)
    p.add_argument("--rates", nargs="*", default=["10gbit", "1gbit", "100mbit"])
    p.add_argument("--hooks", nargs="+", default=["none", "fp16", "powersgd"],
                   choices=["none", "fp16", "bf16", "powersgd"])
    p.add_argument("--powersgd_rank", type=int, default=1)
    p.add_argument("--steps", type=int, default=8, help="timed optimizer steps per run")
    p.add_argument("--warmup", type=int, default=2, help="optimizer steps before timing (>= 1)")
    p.add_argument("--batch", type=int, default=8, help="utterances per rank per step")
    p.add_argument("--cv_steps", type=int, default=0,
                   help="timed steps of the runs at --cv_rate, whose CV losses are compared (0: no comparison)")
    p.add_argument("--cv_rate", default="10gbit")
    p.add_argument("--loopback_hooks", nargs="*", default=["none"], choices=["none", "fp16", "bf16", "powersgd"],
                   help="hooks of the one-host x 2-process runs (the option without a value: no such run)")
    p.add_argument("--no_alone", dest="alone", action="store_false")
    p.add_argument("--timeout", type=int, default=300, help="seconds one run may take")
    p.add_argument("--json", type=Path, default=None, help="write the raw results here")
    p.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    p.add_argument("--note", default="", help="a line written under the command in --markdown")
    worker_args = p.add_argument_group("worker mode (started by the driver through torchrun)")
    worker_args.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("iface", "train_data", "cv_data", "model_dir"):
        worker_args.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.warmup < 1 or args.steps < 1:
        print("network_cost: --warmup and --steps must be >= 1", file=sys.stderr)
        return 2
    started = time.time()
    result = measure(args)
    import torch
    machine = (f"{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
               f"torch {torch.__version__}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
               f"{time.time() - started:.0f} s in all")
    command = "python bench/network_cost.py " + shlex.join(argv)
    result.update(command=command, machine=machine)
    table = markdown(result, command, machine, args.note)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
