#!/usr/bin/env python3
"""The GPU check: one command that runs asrkit's CUDA, nccl and mixed-precision paths and
measures training speed on one GPU, within a time budget, leaving one results archive.

    python -m bench.gpu_check [--budget 290] [--archive PATH] [--work DIR] [--cpu_dry_run]

Stages, most important first, each a process of its own (``bench/gpu_stages/``) with a
time cap, cut to what is left of ``--budget`` (a stage that cannot get its minimum is
skipped, saying so):

0. ``first_epoch`` (issue 57): a real AISHELL-1-size first epoch, every batch shape new, per
   variant in a process of its own -- bf16 with asrkit's defaults (``bucket_frames``, cuDNN
   attention off), bf16 with cuDNN off altogether, TF32; others by name -- with new-shape
   against seen-shape step times, host syncs per step, shapes, padding and the projected
   AISHELL-1 epoch (it takes the default budget and more: ``--stages first_epoch --budget
   340`` runs it alone, ``--budget 800`` runs all);
a. ``gpu_tests``: the suite's GPU tests (``pytest -m gpu``) on the carried corpus -- the
   CUDA paths of training in fp32, TF32, bf16 and fp16 with GradScaler, nccl with world
   size 1, two ranks on the one GPU with gloo (DDP + CUDA + AMP, a stuck rank), an fp16
   checkpoint resuming exactly;
b. ``digits``: the digits recipe's model 300 steps in fp32, bf16, fp16 -- non-finite
   steps, CV loss against fp32's, host syncs per optimizer step;
c. ``aishell``: the AISHELL-size conformer on AISHELL-1-like synthetic utterances --
   steady-state rates per precision, peak memory, data-wait share per loader worker count,
   a profiler summary, encoder matmuls against ``torch.matmul``; ``compile``: its encoder
   under ``torch.compile`` against eager;
d. the projected AISHELL-1 epoch on one GPU: 150 h x 360,000 frames/h / real frames/s.

Each stage writes ``<work>/<stage>.json`` as it measures, and after every stage the results
archive (``--archive``: the JSON files, the summary, the profiler table and the logs' last
lines; well under 16 MiB) is written again, so a run cut off still returns what it
measured.  The summary table is printed at the end, with the machine it ran on.

Before anything runs, the environment is checked: what is missing is said in one line
(exit status 2).  ``--cpu_dry_run`` runs every stage at tiny sizes on CPU (under a minute:
the suite runs it, tests/bench/test_gpu_check.py), CUDA-only parts reported as such.
docs/performance.md ("GPU check") gives the command for a GPU machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.gpu_stages import env_check
from bench.gpu_stages.corpus import unpack_corpus
from bench.gpu_stages.process import run_with_deadline, tail

REPO = Path(__file__).resolve().parents[1]
AISHELL_HOURS, FRAMES_PER_HOUR = 150, 360_000  # 100 fbank frames a second
LOG_TAIL_BYTES = 256 * 1024
STARTUP_S = 12.0  # a stage's own budget ends this long before its kill (imports, CUDA start, the last write)


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    module: str
    cap_s: float       # at most this long
    minimum_s: float   # skipped when less than this is left
    args: Callable[["argparse.Namespace", Path], list[str]]


STAGES = (
    Stage("first_epoch", "bench.gpu_stages.first_epoch", 330, 60, lambda a, w: []),
    Stage("gpu_tests", "bench.gpu_stages.gpu_tests", 110, 30, lambda a, w: ["--corpus", str(a.corpus.resolve())]),
    Stage("digits", "bench.gpu_stages.digits", 100, 20, lambda a, w: ["--digits", str(w / "corpus" / "digits")]),
    Stage("aishell", "bench.gpu_stages.aishell", 180, 30, lambda a, w: []),
    Stage("compile", "bench.gpu_stages.compile_check", 80, 25, lambda a, w: []),
)


def run_stage(stage: Stage, args, work: Path, seconds: float) -> dict:
    """Run one stage in its own process group for at most ``seconds``; its record."""
    cmd = [sys.executable, "-m", stage.module, "--out", str(work), "--seconds", f"{max(seconds - STARTUP_S, 5):.0f}",
           *(["--cpu_dry_run"] if args.cpu_dry_run else []), *stage.args(args, work)]
    log = work / f"{stage.name}.log"
    # the dry run's tiny models run fastest on one thread, beside whatever else uses the cores
    env = dict(os.environ, OMP_NUM_THREADS="1") if args.cpu_dry_run else None
    done = run_with_deadline(cmd, seconds, log, env=env, cwd=REPO)
    path = work / f"{stage.name}.json"
    record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"results": {}, "summary": []}
    record.update(returncode=done.returncode, wall_seconds=done.seconds, cut_off=done.timed_out)
    if done.timed_out:
        record["status"] = "cut off"
    elif done.returncode != 0:
        record["status"] = "failed"
        last = [line for line in tail(log, 4000).splitlines() if line.strip()][-1:] or ["(no output)"]
        record["summary"] = record.get("summary", []) + [f"{stage.name}  failed (exit {done.returncode}): {last[0][:200]}"]
    if not record.get("summary"):
        record["summary"] = [f"{stage.name}  {record.get('status', 'no result')} after {done.seconds:.0f} s"]
    path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    return record


def projection(aishell: dict) -> dict:
    """The projected AISHELL-1 epoch per precision from stage c's steady-state rates."""
    frames = AISHELL_HOURS * FRAMES_PER_HOUR
    out = {"formula": f"epoch seconds = {AISHELL_HOURS} h x {FRAMES_PER_HOUR:,} frames/h / real frames/s "
                      f"= {frames:,} / real frames/s", "epoch_seconds": {}}
    for name, r in aishell.get("results", {}).items():
        if isinstance(r, dict) and r.get("real_frames_per_s"):
            out["epoch_seconds"][name] = round(frames / r["real_frames_per_s"], 1)
    return out


def write_archive(work: Path, archive: Path) -> None:
    """The results archive: every ``*.json``, ``*.txt`` and ``*.xml`` of ``work`` and the
    last :data:`LOG_TAIL_BYTES` of each stage log; written beside, then renamed over."""
    staged = archive.with_name(archive.name + ".partial")
    with tarfile.open(staged, "w:gz") as tar:
        for path in sorted(work.iterdir()):
            if path.suffix in (".json", ".txt", ".xml") and path.is_file():
                tar.add(path, f"gpu_check/{path.name}")
            elif path.suffix == ".log":
                text = tail(path, LOG_TAIL_BYTES).encode("utf-8")
                info = tarfile.TarInfo(f"gpu_check/{path.name}")
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))
    staged.replace(archive)


def summary_table(rows: list[tuple[str, str, str]], lines: list[str], machine: dict) -> str:
    width = max(len(r[0]) for r in rows) if rows else 5
    out = [f"{'stage'.ljust(width)}  {'status':10}  seconds", f"{'-' * width}  {'-' * 10}  -------"]
    out += [f"{name.ljust(width)}  {status:10}  {secs:>7}" for name, status, secs in rows]
    out += ["", *lines, "",
            f"ran on: {machine.get('gpu') or 'CPU (dry run)'}, torch {machine.get('torch')} (CUDA "
            f"{machine.get('cuda_build')}), Python {machine.get('python')}, {machine.get('cpus')} CPUs, "
            f"{datetime.date.today().isoformat()}"]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=290.0, help="seconds for all stages together")
    p.add_argument("--corpus", type=Path, default=REPO / ".gpu_carry" / "gpu_corpus.tar.gz")
    p.add_argument("--work", type=Path, default=Path("/tmp/asrkit_gpu_check"), help="working folder (emptied)")
    p.add_argument("--archive", type=Path, default=None, help="results archive (default: <work>.tar.gz)")
    p.add_argument("--stages", default=",".join(s.name for s in STAGES), help="comma-separated subset")
    p.add_argument("--cpu_dry_run", action="store_true", help="tiny sizes on CPU: checks the script, measures nothing")
    args = p.parse_args(argv)
    wanted = args.stages.split(",")
    unknown = sorted(set(wanted) - {s.name for s in STAGES})
    missing = env_check.problems(args.corpus, args.cpu_dry_run)
    if unknown or missing:
        problems = ([f"unknown stage(s) {', '.join(unknown)}"] if unknown else []) + missing
        print("gpu_check: cannot start: " + "; ".join(problems), file=sys.stderr)
        return 2
    start = time.perf_counter()
    work = args.work.resolve()
    archive = (args.archive or work.with_name(work.name + ".tar.gz")).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    machine = env_check.describe()
    (work / "environment.json").write_text(json.dumps({**machine, "budget_s": args.budget,
                                                      "dry_run": args.cpu_dry_run}, indent=1), encoding="utf-8")
    if "digits" in wanted:
        unpack_corpus(args.corpus, work / "corpus", "digits")
    rows, lines = [], []
    for stage in (s for s in STAGES if s.name in wanted):
        left = args.budget - (time.perf_counter() - start)
        if left < stage.minimum_s:
            rows.append((stage.name, "skipped", "0"))
            lines.append(f"{stage.name}  skipped: {left:.0f} s of the budget left, it needs {stage.minimum_s:.0f} s")
            continue
        record = run_stage(stage, args, work, min(stage.cap_s, left))
        rows.append((stage.name, record.get("status", "?"), f"{record['wall_seconds']:.0f}"))
        lines += record["summary"]
        (work / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        write_archive(work, archive)
    aishell = work / "aishell.json"
    if aishell.is_file():
        proj = projection(json.loads(aishell.read_text(encoding="utf-8")))
        (work / "projection.json").write_text(json.dumps(proj, indent=1), encoding="utf-8")
        rows.append(("projection", "done" if proj["epoch_seconds"] else "no rate", "0"))
        lines.append("projection  " + proj["formula"] + ": " + (", ".join(
            f"{k} {v:.0f} s" for k, v in proj["epoch_seconds"].items()) or "no steady-state rate measured"))
    table = summary_table(rows, lines, machine)
    (work / "summary.txt").write_text(table + "\n", encoding="utf-8")
    write_archive(work, archive)
    print(f"\n{table}\n\nresults: {archive} ({archive.stat().st_size / 2**20:.2f} MiB); "
          f"{time.perf_counter() - start:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
