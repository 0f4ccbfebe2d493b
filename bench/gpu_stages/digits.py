"""Stage b of the GPU check: the digits recipe's model (``examples/digits/s0/conf/
train_conformer_cpu.yaml``) trained ``--steps`` optimizer steps in fp32, bf16 and fp16 on the
carried digits corpus, through ``build_training`` and the executor.

Per precision: the non-finite steps (faults) and fp16's GradScaler calibration skips, the
CV loss after training (against fp32's: the target is within 2 %), the host syncs per
optimizer step in steady state (``torch.cuda.set_sync_debug_mode("warn")`` from step
``--sync_from`` on; the target is none beyond the step's one collective) and the
steady-state rates, and on a GPU a profiler table of 3 more steps
(``profile_digits_<precision>.txt``).  Every precision starts from the same seed (the same
initial weights and batches).

    python -m bench.gpu_stages.digits --out DIR --seconds 70 --digits CORPUS_DIR [--cpu_dry_run]
"""
from __future__ import annotations

import contextlib
import io
import logging
import time
from pathlib import Path

import torch

from asrkit.train.build import build_training
from asrkit.train.dist import DistContext
from bench.gpu_stages.aishell_profile import summary_table
from bench.gpu_stages.common import (PRECISIONS, MeasuredLoader, StageRecord, StepMarks, SyncCount, device_for,
                                     free_memory, load_cfg, make_executor, mark, other_warnings, recording_warnings, stage_args,
                                     train_steps)
from tools import compute_cmvn_stats, make_raw_list, make_units

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples/digits/s0/conf/train_conformer_cpu.yaml"
COMPARED = ("fp32", "bf16", "fp16")
CV_TOLERANCE = 0.02
# the dry run's model: the recipe's config made tiny (seconds on a CPU)
DRY_RUN_OVERRIDES = ["encoder_conf.output_size=32", "encoder_conf.attention_heads=2", "encoder_conf.linear_units=64",
                     "encoder_conf.num_blocks=1", "decoder_conf.attention_heads=2", "decoder_conf.linear_units=64",
                     "decoder_conf.num_blocks=1", "dataset_conf.batch_conf.max_frames_in_batch=1200"]


def prepare(corpus: Path, work: Path) -> dict:
    """Data lists, units and CMVN of the digits corpus, made by the recipe's tools."""
    work.mkdir(parents=True, exist_ok=True)
    lists = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for split in ("train", "dev"):
            lists[split] = work / f"{split}.list"
            if make_raw_list.main([str(corpus / split / "wav.scp"), str(corpus / split / "text"), str(lists[split])]):
                raise RuntimeError(f"make_raw_list failed for {corpus / split}")
        units = work / "units.txt"
        if make_units.main([str(corpus / "train" / "text"), str(units)]):
            raise RuntimeError("make_units failed")
    cmvn = work / "global_cmvn"
    if compute_cmvn_stats.main(["--train_config", str(CONFIG), "--data_list", str(lists["train"]),
                                "--out_cmvn", str(cmvn), "--num_workers", "2"]):
        raise RuntimeError("compute_cmvn_stats failed")
    return {"train": lists["train"], "dev": lists["dev"], "units": units, "cmvn": cmvn}


def run_precision(name: str, files: dict, overrides: list[str], device: torch.device, steps: int, sync_from: int,
                  deadline: float, work: Path) -> dict:
    precision = PRECISIONS[name]
    precision.apply()
    cfg = load_cfg(CONFIG, [*overrides, f"dtype={precision.dtype}"])
    ctx = DistContext(device=device)
    parts = build_training(cfg, ctx, train_data=str(files["train"]), cv_data=str(files["dev"]), ddp=False)
    loader = MeasuredLoader(parts.train_loader)
    executor = make_executor(parts, ctx, work / name, precision)
    marks = StepMarks()
    start = time.perf_counter()
    with recording_warnings() as caught:
        syncs = SyncCount(caught, device)

        def on_step(state):
            if state.step == sync_from:
                mark(marks, state.step, loader, device)
                syncs.start(state.step)
            if state.step == steps:
                syncs.stop(state.step)
                mark(marks, state.step, loader, device)

        state = train_steps(executor, loader, steps, deadline, on_step)
        syncs.stop(state.step)
    train_seconds = time.perf_counter() - start
    profile = None
    if device.type == "cuda":  # where the steps' time goes (a few more steps, profiled)
        try:
            profile = summary_table(executor, loader, device, 3, work.parent / f"profile_digits_{name}.txt")
        except Exception as e:  # a profiler failure must not lose the results
            profile = {"error": f"{type(e).__name__}: {e}"}
    parts.cv_loader.set_epoch(0)
    cv = executor.cv(parts.cv_loader)
    result = {"steps": state.step, "steps_wanted": steps, "epochs": state.epoch,
              "nonfinite_steps": state.nonfinite_total, "scaler_skips": state.scaler_skips,
              "cv_loss": round(cv["loss"], 5), "train_seconds": round(train_seconds, 2),
              "host_syncs": syncs.report(), "other_warnings": other_warnings(caught), "profile": profile}
    if sync_from in marks.at and steps in marks.at:
        result["steady"] = marks.span(sync_from, steps)
    del parts, executor, loader
    free_memory(device)
    return result


def main(argv=None) -> int:
    p = stage_args(__doc__.splitlines()[0])
    p.add_argument("--digits", type=Path, required=True, help="the unpacked digits corpus (train/, dev/)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--sync_from", type=int, default=100, help="count host syncs from this step on")
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    record = StageRecord(args.out, "digits")
    start = time.perf_counter()
    device = device_for(args.cpu_dry_run)
    steps, sync_from = (3, 1) if args.cpu_dry_run else (args.steps, args.sync_from)
    files = prepare(args.digits, args.out / "digits_work")
    overrides = [f"tokenizer_conf.symbol_table_path={files['units']}", f"cmvn_conf.cmvn_file={files['cmvn']}",
                 f"dataset_conf.num_workers={0 if args.cpu_dry_run else args.workers}", "log_interval=100",
                 "max_epoch=1000",  # (the steps decide, not the recipe's epochs)
                 *(DRY_RUN_OVERRIDES if args.cpu_dry_run else [])]
    record.record("setup", {"config": str(CONFIG), "overrides": overrides, "device": str(device),
                            "prepare_seconds": round(time.perf_counter() - start, 2)})
    left = args.seconds - (time.perf_counter() - start)
    results = {}
    for i, name in enumerate(COMPARED):
        # each precision may use an equal share of what is left, less a CV's worth
        deadline = time.perf_counter() + max(left / len(COMPARED) * 0.85, 1.0)
        results[name] = run_precision(name, files, overrides, device, steps, sync_from, deadline,
                                      args.out / "digits_work")
        base = results.get("fp32", {}).get("cv_loss")
        if base and name != "fp32":
            rel = results[name]["cv_loss"] / base - 1
            results[name]["cv_vs_fp32"] = round(rel, 4)
            results[name]["cv_within_2pc"] = abs(rel) <= CV_TOLERANCE
        record.record(name, results[name])
    record.summary(summary_line(results))
    record.finish()
    return 0


def summary_line(results: dict) -> str:
    parts = []
    for name, r in results.items():
        syncs = r["host_syncs"].get("syncs_per_step")
        rel = f" ({100 * r['cv_vs_fp32']:+.1f} % vs fp32)" if "cv_vs_fp32" in r else ""
        parts.append(f"{name}: {r['steps']} steps, {r['nonfinite_steps']} non-finite, CV {r['cv_loss']:.3f}{rel}, "
                     f"syncs/step {'n/a' if syncs is None else syncs}")
    return "digits  " + " | ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
