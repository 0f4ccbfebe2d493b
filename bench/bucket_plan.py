#!/usr/bin/env python3
"""The batch plan's padding and distinct batch shapes for AISHELL-1's durations: the GPU
stage's ``dynamic`` batches against ``bucket_frames`` (CPU only, about a second).

    python -m bench.bucket_plan [--utterances 120098] [--world 8] [--buckets 8,12,16,20]

The list is what the GPU check's AISHELL stage plans (``bench.gpu_stages.aishell_data``:
AISHELL-1's training-set size and durations, 3.2 characters a second, one unit per
character) with the AISHELL recipe's loader settings (speed perturbation 0.9/1.0/1.1,
shuffle windows of 1,500, sort windows of 500) and the stage's 128,000-frame
micro-batches; epoch 0 dealt to ``--world`` ranks.  A shape is (batch size, padded
frames, padded target length); padding is the share of padded frames (target units)
that are padding, from planned lengths.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from asrkit.data.loader_schema import LoaderKeys
from asrkit.data.sampler import EpochPlanner
from bench.gpu_stages.aishell_data import CHARS_PER_S, durations

AISHELL_TRAIN_UTTERANCES = 120_098
SPEEDS = (0.9, 1.0, 1.1)


def aishell_list(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Durations (s) and target lengths drawn as ``aishell_data.make_set`` draws them."""
    rng = np.random.default_rng(seed)
    seconds = durations(count, rng)
    tokens = np.maximum(1, np.round(seconds * CHARS_PER_S * rng.uniform(0.8, 1.2, count))).astype(np.int64)
    return seconds, tokens


def plan_figures(batch_type: str, seconds: np.ndarray, tokens: np.ndarray, *, world: int = 8,
                 max_frames: int = 128_000, num_buckets: int = 16, seed: int = 0, epoch: int = 0) -> dict:
    """``EpochPlanner.plan_stats`` of one epoch of this list under ``batch_type``."""
    conf = LoaderKeys()
    conf.shuffle_conf.shuffle_size, conf.sort_conf.sort_size = 1500, 500
    conf.batch_conf.batch_type, conf.batch_conf.max_frames_in_batch = batch_type, max_frames
    conf.batch_conf.num_buckets = num_buckets
    planner = EpochPlanner([f"utt{i:06d}" for i in range(len(seconds))], seconds, [None] * len(seconds), conf,
                           train=True, seed=seed, speeds=SPEEDS, tokens=tokens)
    return planner.plan_stats(epoch, world)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--utterances", type=int, default=AISHELL_TRAIN_UTTERANCES)
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--max_frames", type=int, default=128_000)
    p.add_argument("--buckets", default="8,12,16,20")
    args = p.parse_args(argv)
    seconds, tokens = aishell_list(args.utterances)
    print(f"{args.utterances} utterances, {seconds.sum() / 3600:.1f} h, {args.max_frames} frames a batch, "
          f"{args.world} ranks, epoch 0")
    print(f"{'batches':24} {'batches':>8} {'shapes':>7} {'frame padding':>14} {'unit padding':>13}")
    rows = [("dynamic (the GPU stage)", plan_figures("dynamic", seconds, tokens, world=args.world,
                                                     max_frames=args.max_frames))]
    rows += [(f"bucket_frames, {k} buckets", plan_figures("bucket_frames", seconds, tokens, world=args.world,
                                                          max_frames=args.max_frames, num_buckets=int(k)))
             for k in args.buckets.split(",")]
    for name, st in rows:
        print(f"{name:24} {st['batches']:>8} {st['shapes']:>7} {100 * st['frame_padding']:>13.1f}% "
              f"{100 * st['token_padding']:>12.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
