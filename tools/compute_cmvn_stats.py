#!/usr/bin/env python3
"""Global CMVN statistics of a training set, as WeNet JSON.

Features are exactly those of the training pipeline without augmentation: load
(down-mix), resample to ``resample_conf.resample_rate``, the features ``feats_type``
selects from ``--train_config`` (Kaldi fbank with ``fbank_conf``, dither off, or Whisper's
log-mel with ``log_mel_spectrogram_conf``).  Output::

    {"mean_stat": [sum per dim], "var_stat": [sum of squares per dim], "frame_num": N,
     "asrkit_features": {the filterbank's settings: asrkit.data.features.feature_record}}

asrkit refuses to train with statistics recorded for other features.  ``--keep_existing``
(the recipes' stage 1): an existing ``--out_cmvn`` of the same features is kept; one of
other features, or one that records none, is an error (exit 2) -- a recipe whose configs
use other features names another CMVN file.

Input: ``--in_scp`` (Kaldi ``wav.scp``) or ``--data_list`` (raw or shard list).
Unreadable or empty audio is skipped, each logged with its reason and counted.
Parallel over ``--num_workers`` processes; statistics are summed in float64, in input
order, so the result does not depend on the number of workers.

Usage:
    tools/compute_cmvn_stats.py --train_config conf/train.yaml \\
        --in_scp data/train/wav.scp --out_cmvn data/train/global_cmvn --num_workers 2
"""
from __future__ import annotations

import argparse
import logging
import multiprocessing
import sys
from pathlib import Path

import torch

from asrkit.config import TrainConfig, load_config
from asrkit.data import processors
from asrkit.data.audio import DataFault
from asrkit.data.feature_steps import feature_step
from asrkit.data.features import (CmvnStats, feature_record, features_difference,
                                  recorded_features, write_cmvn)
from asrkit.data.lists import ListEntry, read_list, read_wav_scp
from asrkit.files import WriteError

_CHUNK = 64


def chunk_stats(job: tuple[list[ListEntry], object]) -> tuple[CmvnStats, list[processors.Skip]]:
    """Statistics of one chunk of entries, and the entries skipped."""
    torch.set_num_threads(1)
    entries, conf = job
    stats, skipped, features = CmvnStats(conf.feat_dim), [], feature_step(conf, train=False)
    for entry in entries:
        try:
            sample = processors.load(entry)
            sample = processors.resample(sample, None, resample_rate=conf.resample_conf.resample_rate)
            sample = features(sample, None)
        except DataFault as fault:
            skipped.append(processors.Skip(entry.key, fault.reason, fault.detail))
            continue
        stats.add(sample["feat"])
    return stats, skipped


def keep_existing(path: Path, features: dict) -> int:
    """0 when ``path`` holds statistics of ``features`` (kept), else 2 with one line."""
    recorded = recorded_features(path)
    if recorded is None:
        print(f"error: {path} records no features (written by WeNet or an older asrkit): delete it to "
              f"recompute it, or point the config's cmvn_file elsewhere", file=sys.stderr)
        return 2
    difference = features_difference(recorded, features)
    if difference:
        print(f"error: {path} holds statistics of other features ({difference}): delete it to recompute "
              f"it, or give this config another cmvn_file", file=sys.stderr)
        return 2
    logging.info("%s exists, statistics of these features: kept", path)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--in_scp", type=Path, help="Kaldi wav.scp")
    src.add_argument("--data_list", type=Path, help="raw or shard data list")
    p.add_argument("--train_config", type=Path, default=None, help="training YAML (fbank_conf, resample_conf)")
    p.add_argument("--override", action="append", default=[], help="a.b=value edits of the config")
    p.add_argument("--out_cmvn", type=Path, required=True)
    p.add_argument("--num_workers", type=int, default=1)
    p.add_argument("--keep_existing", action="store_true",
                   help="keep an existing --out_cmvn of the same features (other features: exit 2)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    cfg = load_config(args.train_config, args.override) if args.train_config else TrainConfig()
    features = feature_record(cfg.dataset_conf)
    if args.keep_existing and args.out_cmvn.exists():
        return keep_existing(args.out_cmvn, features)
    if args.in_scp:
        entries = [ListEntry(key=k, txt="", duration=0.0, wav=w) for k, w in read_wav_scp(args.in_scp).items()]
    else:
        entries = read_list(args.data_list)
    jobs = [(entries[i:i + _CHUNK], cfg.dataset_conf) for i in range(0, len(entries), _CHUNK)]
    total = CmvnStats(cfg.dataset_conf.feat_dim)
    skips = processors.SkipStats()
    with multiprocessing.Pool(max(1, min(args.num_workers, len(jobs)))) as pool:
        for stats, skipped in pool.imap(chunk_stats, jobs):
            total.merge(stats)
            for skip in skipped:
                skips.add(skip)
    if total.frames == 0:
        logging.error("no usable audio in the input (%s)", skips.summary())
        return 1
    try:
        write_cmvn(args.out_cmvn, total, features)
    except WriteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    logging.info("wrote CMVN of %d frames from %d utterances to %s; %s", total.frames,
                 len(entries) - skips.total, args.out_cmvn, skips.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
