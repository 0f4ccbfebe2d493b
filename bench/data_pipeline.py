#!/usr/bin/env python3
"""Data-pipeline throughput: utterances/s and audio-seconds/s through the training chain

    read -> speed perturb -> fbank (dither) -> SpecAugment -> collate

for raw and shard inputs, in one process with one torch thread (what one DataLoader
worker does), plus the time of speed perturbation of a 2 s utterance and a per-step
breakdown.  ``--model_config`` also times training steps (forward, backward, Adam)
of that model on the same batches with 2 threads: the audio-seconds/s a 2-core CPU
trainer consumes, to compare with what one worker produces.  Without ``--data_list`` a
corpus of ``--utts`` espeak-ng utterances is synthesized into ``--workdir`` (reused on
later runs).  Prints a markdown table.

Usage:
    bench/data_pipeline.py [--utts 300] [--repeats 3] [--workdir bench/results/data] \
        [--model_config conf/train_conformer_small.yaml]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.data import processors
from asrkit.data.audio import speed_perturb
from asrkit.data.lists import read_list
from asrkit.text import build_tokenizer

REPO = Path(__file__).resolve().parents[1]
BATCH = 16
DATASET_CONF = {"speed_perturb": True, "fbank_conf": {"num_mel_bins": 80, "dither": 0.1},
                "spec_aug": True, "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 50, "max_f": 10}}


def tool(name: str, *args) -> None:
    subprocess.run([sys.executable, str(REPO / "tools" / name), *map(str, args)], check=True,
                   capture_output=True, text=True)


def prepare(workdir: Path, utts: int, data_list: Path | None) -> tuple[Path, Path, Path]:
    """Raw list, shard list and units of the benchmark corpus."""
    workdir.mkdir(parents=True, exist_ok=True)
    if data_list is None:
        corpus = workdir / "corpus"
        tool("synthesize_corpus.py", "--out", corpus, "--train", utts, "--dev", 1, "--test", 1, "--jobs", 2)
        data_list = workdir / "raw.list"
        tool("make_raw_list.py", corpus / "train" / "wav.scp", corpus / "train" / "text", data_list)
    units, shards = workdir / "units.txt", workdir / "shards.list"
    tool("make_units.py", data_list, units)
    tool("make_shard_list.py", "--num_utts_per_shard", 100, "--num_threads", 2, data_list,
         workdir / "tars", shards)
    return data_list, shards, units


def run_pipeline(proc: processors.SampleProcessor, entries, epoch: int) -> float:
    """Seconds to turn ``entries`` into batches of ``BATCH``."""
    start = time.perf_counter()
    for i in range(0, len(entries), BATCH):
        proc.collate([proc(e, epoch) for e in entries[i:i + BATCH]])
    return time.perf_counter() - start


def step_breakdown(proc: processors.SampleProcessor, entries, epoch: int = 0) -> dict[str, float]:
    """Mean milliseconds per utterance of each step (load, then the configured steps), the
    samples built as ``proc(entry, epoch)`` builds them."""
    totals: dict[str, float] = {}
    for e in entries:
        gen = processors.sample_generator(proc.seed, epoch, e.key)
        t = time.perf_counter()
        sample = processors.load(e)
        totals["load"] = totals.get("load", 0.0) + time.perf_counter() - t
        sample["epoch"] = epoch  # speed_perturb draws its factor from (seed, epoch, key)
        for step in proc.steps:
            t = time.perf_counter()
            sample = step(sample, gen)
            name = step.func.__name__
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - t
    return {k: 1000 * v / len(entries) for k, v in totals.items()}


def speed_perturb_ms(repeats: int = 200) -> tuple[float, float]:
    """Median and 90th-percentile milliseconds to speed-perturb 2 s of 16 kHz audio (0.9/1.1)."""
    wav = torch.randn(1, 32000) * 0.1
    for s in (0.9, 1.1):
        speed_perturb(wav, 16000, s)  # build the cached filters
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        speed_perturb(wav, 16000, (0.9, 1.1)[i % 2])
        times.append(1000 * (time.perf_counter() - t))
    times.sort()
    return statistics.median(times), times[int(0.9 * len(times))]


def trainer_audio(model_config: Path, units: Path, proc: processors.SampleProcessor, entries,
                  steps: int = 3) -> tuple[float, float]:
    """Audio seconds trained (10 ms frames / 100) and the seconds that took, over ``steps``
    training steps of ``model_config``'s model (2 threads, CMVN off) on batches of ``BATCH``
    from ``proc``, after a warm-up step; going round ``entries`` again when it has fewer
    than ``(steps + 1) * BATCH``."""
    from asrkit.config import load_config
    from asrkit.models.registry import build_model

    cfg = load_config(model_config, ["cmvn=null", f"tokenizer_conf.symbol_table_path={units}"])
    model = build_model(cfg, proc.feat_dim, build_tokenizer(cfg).vocabulary)
    optim = torch.optim.Adam(model.parameters())
    torch.set_num_threads(2)
    try:
        audio, secs = 0.0, 0.0
        for i in range(steps + 1):
            chosen = [entries[(i * BATCH + j) % len(entries)] for j in range(BATCH)]
            batch = proc.collate([proc(e, 0) for e in chosen])
            start = time.perf_counter()
            loss = model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])["loss"]
            loss.backward()
            optim.step()
            optim.zero_grad()
            if i:
                secs += time.perf_counter() - start
                audio += batch["feats_lengths"].sum().item() / 100
    finally:
        torch.set_num_threads(1)
    return audio, secs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_list", type=Path, default=None, help="raw list to use instead of a synthesized corpus")
    p.add_argument("--utts", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model_config", type=Path, default=None, help="also time training steps of this model")
    p.add_argument("--workdir", type=Path, default=REPO / "bench" / "results" / "data")
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    raw_list, shard_list, units = prepare(args.workdir, args.utts, args.data_list)
    cfg = build(TrainConfig, {"tokenizer_conf": {"symbol_table_path": str(units)}, "dataset_conf": DATASET_CONF})
    proc = processors.build_sample_processor(cfg.dataset_conf, build_tokenizer(cfg), train=True, seed=0)
    rows = []
    for name, path in (("raw", raw_list), ("shard", shard_list)):
        entries = read_list(path)
        audio_s = sum(e.duration for e in entries)
        run_pipeline(proc, entries[:BATCH], 0)  # warm-up: filters, allocator, file cache
        secs = [run_pipeline(proc, entries, epoch) for epoch in range(1, 1 + args.repeats)]
        best, med = min(secs), statistics.median(secs)
        rows.append((name, len(entries), audio_s, len(entries) / med, audio_s / med, audio_s / best))
    sp_med, sp_p90 = speed_perturb_ms()
    breakdown = step_breakdown(proc, read_list(raw_list))
    trainer = (trainer_audio(args.model_config, units, proc, read_list(shard_list))
               if args.model_config else None)

    print(f"torch {torch.__version__}, 1 thread, {args.repeats} epochs each; batch {BATCH}; "
          f"{DATASET_CONF}\n")
    print("| input | utts | audio (s) | utts/s (median) | audio s/s (median) | audio s/s (best) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, audio_s, ups, aps, best in rows:
        print(f"| {name} | {n} | {audio_s:.0f} | {ups:.0f} | {aps:.0f} | {best:.0f} |")
    print(f"\nspeed perturbation of a 2 s utterance: median {sp_med:.2f} ms, p90 {sp_p90:.2f} ms\n")
    print("| step | ms / utterance |")
    print("|---|---:|")
    for name, ms in breakdown.items():
        print(f"| {name} | {ms:.2f} |")
    if trainer is not None:
        audio_s, secs = trainer
        print(f"\ntraining steps of {args.model_config} (2 threads): {audio_s / secs:.1f} audio s/s consumed "
              f"({audio_s:.1f} s of audio in {secs:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
