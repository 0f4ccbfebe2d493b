#!/usr/bin/env python3
"""Decoding real-time factor of a model on real audio.

    bench/decode_rtf.py --data data/test/data.list [--config conf/train_conformer_small.yaml]
        [--checkpoint exp/small/avg_5.pt] [--modes attention_rescoring] [--beam_size 10]
        [--batch_size 16] [--threads 2] [--max_utts 200]

Features (``dataset_conf.feats_type``, ``dataset_conf.feat_dim`` bins) are computed first and
timed separately; the reported RTF is **model time** (CMVN + encoder + searches, one
encoder pass per batch for all modes) / audio duration, batches formed in order of
decreasing length.  One warm-up batch is decoded first and not counted.

Without ``--checkpoint`` the model is randomly initialised: its CTC posteriors are flat,
so prefix beam search never skips a frame and keeps ``beam`` prefixes alive everywhere:
a pessimistic figure.  The report says which was used.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from asrkit.config import load_config
from asrkit.data.features import compute_fbank, fbank_options
from asrkit.data.lists import read_list
from asrkit.decode import MODES, DecodingOptions, decode
from asrkit.decode.ctc_search import DEFAULT_BLANK_SKIP_THRESHOLD
from asrkit.decode.recognizer import duration_batches
from asrkit.trained_model import build_trained_model
from asrkit.models import build_model, count_parameters
from asrkit.text.vocabulary import Vocabulary


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="raw data.list with wav paths and durations")
    p.add_argument("--config", default="conf/train_conformer_small.yaml")
    p.add_argument("--checkpoint", default=None, help="trained checkpoint (default: random init)")
    p.add_argument("--vocab_size", type=int, default=None,
                   help="units (default: the config's output_dim; required for random init without it)")
    p.add_argument("--modes", nargs="+", default=["attention_rescoring"], choices=MODES)
    p.add_argument("--beam_size", type=int, default=10)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--ctc_weight", type=float, default=0.3)
    p.add_argument("--blank_skip_threshold", type=float, default=DEFAULT_BLANK_SKIP_THRESHOLD)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max_utts", type=int, default=0, help="use only the first N utterances (0: all)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    return p.parse_args(argv)


def load_audio_features(entries, fbank_conf) -> tuple[list[torch.Tensor], float]:
    import soundfile as sf
    t0 = time.perf_counter()
    feats = []
    for e in entries:
        wav, rate = sf.read(e.wav, dtype="float32", always_2d=True)
        waveform = torch.from_numpy(wav.T[:1].copy())
        feats.append(compute_fbank(waveform, rate, **fbank_options(fbank_conf), dither=0.0))
    return feats, time.perf_counter() - t0


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.override)
    vocab = args.vocab_size or cfg.output_dim
    if args.checkpoint and vocab is None:
        from asrkit.checkpoint.load import load_checkpoint
        vocab = int(load_checkpoint(args.checkpoint)["model"]["ctc.ctc_lo.bias"].numel())
    if vocab is None:
        raise SystemExit("--vocab_size is needed (the config has no output_dim)")
    entries = read_list(args.data)
    if args.max_utts:
        entries = entries[: args.max_utts]
    feats, fbank_s = load_audio_features(entries, cfg.dataset_conf.fbank_conf)
    if args.checkpoint:
        model = build_trained_model(cfg, args.checkpoint, Vocabulary.of_size(vocab))
    else:
        torch.manual_seed(0)
        input_dim = cfg.dataset_conf.feat_dim
        model = build_model(cfg, input_dim, Vocabulary.of_size(vocab), load_cmvn_stats=False).eval()
    batches = duration_batches(entries, args.batch_size)
    options = DecodingOptions(modes=args.modes, beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                              blank_skip_threshold=args.blank_skip_threshold)
    min_frames = model.encoder.min_input_length

    def run(indices):
        chosen = [i for i in indices if feats[i].size(0) >= min_frames]
        x = torch.nn.utils.rnn.pad_sequence([feats[i] for i in chosen], batch_first=True)
        lengths = torch.tensor([feats[i].size(0) for i in chosen])
        return decode(model, x, lengths, options)

    run(batches[0])  # warm-up
    t0 = time.perf_counter()
    for indices in batches:
        run(indices)
    model_s = time.perf_counter() - t0
    audio_s = sum(e.duration for e in entries)
    report = {
        "model": "checkpoint " + args.checkpoint if args.checkpoint else "random init (pessimistic)",
        "config": args.config, "parameters": count_parameters(model), "vocab_size": vocab,
        "modes": args.modes, "beam_size": args.beam_size, "batch_size": args.batch_size,
        "threads": args.threads, "utterances": len(entries), "audio_s": round(audio_s, 1),
        "model_s": round(model_s, 2), "rtf": round(model_s / audio_s, 4),
        "fbank_rtf": round(fbank_s / audio_s, 4),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
