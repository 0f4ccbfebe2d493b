#!/usr/bin/env python3
"""What LM fusion and a large phrase list cost: the time to build the context graph of a
phrase list, and the decoding time of a data list without fusion, with the phrases, with
the LM and with both (docs/decoding.md's speed table).

    python tools/fusion_speed.py --config exp/x/train.yaml --checkpoint exp/x/avg_3.pt \\
        --data data/test/data.list --mode ctc_prefix_beam_search --lm_path data/lm/lm.arpa \\
        --context_list_path phrases_10k.txt [--repeats 3] [--num_threads 1]

The encoder runs once (its time is measured); each configuration then runs the mode's
search (tools/tune_fusion.py's code: recognize's) ``--repeats`` times, the configurations
interleaved so that a busy machine slows them alike; the fastest run of each is reported,
alone and as a slowdown of the whole decode (encoder + search) against no fusion.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from asrkit.config import load_config
from asrkit.data.lists import read_list
from asrkit.data.processors import build_sample_processor
from asrkit.decode import DecodingOptions
from asrkit.decode.context_graph import read_phrase_list
from asrkit.decode.options import DEFAULTS, build_fusion
from asrkit.trained_model import build_trained_model
from asrkit.config_files import load_text_inputs
from asrkit.metrics import score
if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.tune_fusion import decode_point, encode_all


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--mode", default="ctc_prefix_beam_search")
    p.add_argument("--lm_path", default=None)
    p.add_argument("--lm_weight", type=float, default=DEFAULTS["lm_weight"])
    p.add_argument("--word_bonus", type=float, default=DEFAULTS["word_bonus"])
    p.add_argument("--context_list_path", default=None)
    p.add_argument("--context_graph_score", type=float, default=DEFAULTS["context_graph_score"])
    p.add_argument("--beam_size", type=int, default=DEFAULTS["beam_size"])
    p.add_argument("--batch_size", type=int, default=DEFAULTS["batch_size"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--num_threads", type=int, default=0)
    args = p.parse_args(argv)
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    cfg = load_config(args.config)
    tokenizer = load_text_inputs(cfg, model_cmvn=False)
    base = DecodingOptions(modes=(args.mode,), beam_size=args.beam_size, batch_size=args.batch_size)
    configs = {"no fusion": base}
    phrases = read_phrase_list(args.context_list_path) if args.context_list_path else ()
    if phrases:
        configs["phrases"] = dataclasses.replace(base, context_phrases=phrases,
                                                 context_graph_score=args.context_graph_score)
    if args.lm_path:
        configs["LM"] = dataclasses.replace(base, lm_path=args.lm_path, lm_weight=args.lm_weight,
                                            word_bonus=args.word_bonus)
    if phrases and args.lm_path:
        configs["LM + phrases"] = dataclasses.replace(configs["LM"], context_phrases=phrases,
                                                      context_graph_score=args.context_graph_score)
    fusions = {}
    for name, options in configs.items():
        start = time.perf_counter()
        fusions[name] = build_fusion(options, tokenizer)
        if options.fused:
            print(f"{name}: built in {time.perf_counter() - start:.3f} s")
    entries = read_list(args.data)
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False,
                                       labels=False)
    model = build_trained_model(cfg, args.checkpoint, tokenizer.vocabulary)
    start = time.perf_counter()
    batches = encode_all(model, entries, processor, base, "cpu")
    encoder_s = time.perf_counter() - start  # (features and CTC log-probabilities included)
    audio_s = sum(e.duration for e in entries)
    best = {name: float("inf") for name in configs}
    texts = {}
    for _ in range(args.repeats):
        for name, options in configs.items():
            start = time.perf_counter()
            texts[name] = decode_point(batches, options, fusions[name], tokenizer)
            best[name] = min(best[name], time.perf_counter() - start)
    refs = {e.key: e.txt for e in entries}
    print(f"{len(entries)} utterances, {audio_s:.1f} s of audio; features + encoder {encoder_s:.2f} s")
    print(f"{'configuration':<14} {'search s':>9} {'decode s':>9} {'slowdown':>9} {'WER':>6}")
    plain = encoder_s + best["no fusion"]
    for name in configs:
        total = encoder_s + best[name]
        wer = 100 * score(refs, texts[name], "word")[0].rate
        print(f"{name:<14} {best[name]:>9.2f} {total:>9.2f} {100 * (total / plain - 1):>8.1f}% {wer:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
