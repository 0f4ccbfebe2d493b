#!/usr/bin/env python3
"""What noise, reverberation and volume augmentation cost the data pipeline of a recipe,
against the time of one training step on the same batches.

    cd examples/digits/s0 && python ../../../bench/augment_wait.py --config conf/train_conformer_cpu.yaml \\
        --data_list data/train/data.list [--batches 40]

For the recipe's config (its batching, fbank, speed perturbation, SpecAugment) it builds
the training loader in this process with one torch thread -- the work one DataLoader
worker does per batch -- twice: as configured, and with ``reverb``, ``noise`` and
``volume_perturb`` switched on (the config's lists; the noise/RIR cache starts empty, as in
a fresh worker).  Then it times training steps (forward, backward, Adam) of the config's
model on the first batches, with one thread (what each of the digits recipe's 2 CPU
processes has).  A worker that prefetches keeps the trainer waiting only when it needs
longer per batch than a step does, so the table gives the wait that remains,
``max(0, load − step) / step``, and the load as a share of the step.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from asrkit.config import load_config
from asrkit.data.dataset import build_dataloader
from asrkit.data.lists import read_list
from asrkit.data.processors import build_sample_processor
from asrkit.config_files import load_model_inputs
from asrkit.models import build_model
from asrkit.train.scheduler import build_optimizer

AUGMENT = ["dataset_conf.reverb=true", "dataset_conf.noise=true", "dataset_conf.volume_perturb=true"]


def load_times(cfg, inputs, entries, batches: int) -> tuple[list[float], list[dict]]:
    proc = build_sample_processor(cfg.dataset_conf, inputs.tokenizer, train=True, seed=cfg.seed,
                                  cmvn_stats=inputs.data_cmvn)
    loader = build_dataloader(entries, cfg.dataset_conf, proc, train=True, seed=cfg.seed, rank=0, world_size=1)
    loader.set_epoch(0)
    times, out, start = [], [], time.perf_counter()
    for batch in loader:
        now = time.perf_counter()
        times.append(now - start)
        out.append(batch)
        if len(out) == batches:
            break
        start = time.perf_counter()
    return times, out


def step_times(cfg, inputs, batches: list[dict]) -> list[float]:
    model = build_model(cfg, cfg.dataset_conf.feat_dim, inputs.tokenizer.vocabulary,
                        cmvn_stats=inputs.model_cmvn)
    optimizer = build_optimizer(cfg, model.parameters())
    model.train()
    times = []
    for b in batches:
        start = time.perf_counter()
        out = model(b["feats"], b["feats_lengths"], b["target"], b["target_lengths"])
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times[2:]  # (the first steps warm up the allocator)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--data_list", required=True)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    base = ["dataset_conf.num_workers=0", "dtype=fp32"]
    entries = read_list(args.data_list)
    rows, loaded = [], None
    for label, overrides in (("as configured", base), ("+ reverb, noise, volume", base + AUGMENT)):
        cfg = load_config(args.config, overrides)
        inputs = load_model_inputs(cfg, model_cmvn=True)
        times, batches = load_times(cfg, inputs, entries, args.batches)
        loaded = loaded or (cfg, inputs, batches)
        rows.append((label, statistics.median(times), sum(int(b["feats_lengths"].sum()) for b in batches) / len(batches)))
    cfg, inputs, batches = loaded
    step = statistics.median(step_times(cfg, inputs, batches[:args.steps]))
    print(f"{Path(args.config).name}, {args.batches} batches of {len(entries)} utterances, 1 thread\n")
    print("| pipeline | load ms / batch | frames / batch | load / step | wait left with 1 worker |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, load, frames in rows:
        print(f"| {label} | {1000 * load:.1f} | {frames:.0f} | {100 * load / step:.1f} % | "
              f"{100 * max(0.0, load - step) / step:.1f} % |")
    print(f"\ntraining step (forward, backward, Adam; 1 thread): {1000 * step:.1f} ms median")
    return 0


if __name__ == "__main__":
    sys.exit(main())
