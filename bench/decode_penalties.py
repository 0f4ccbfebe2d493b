#!/usr/bin/env python3
"""Error rates of a trained experiment over a grid of WeNet's decoding penalties, to
choose the recipe defaults (``decode_length_penalty``, ``decode_blank_penalty`` in
tools/recipe_defaults.sh) by measurement.

    python bench/decode_penalties.py --config exp/x/train.yaml --checkpoint exp/x/avg_3.pt \\
        --data data/test/data.list --length_penalty 0 0.5 1 1.5 2 [--blank_penalty 0 0.5 1 2] \\
        [--score char] [--beam_size 10] [--batch_size 16] [--ctc_weight 0.3] [--reverse_weight 0.0] \\
        [--decoding_chunk_size -1] [--num_decoding_left_chunks -1] [--json out.json]

Each ``--length_penalty`` value decodes the list in mode ``attention`` (the only mode it
affects); each ``--blank_penalty`` value in the modes it affects that the model has
(``ctc_greedy_search``, ``ctc_prefix_beam_search``, ``attention_rescoring``; their CTC
log-posteriors get the penalty).  Decoding is exactly ``asrkit.bin.recognize``'s (same
feature chain, batching and search code), so a value's row is what stage 5 of a recipe
would score with it.  Prints one row per (penalty, value, mode): the error rate and its
insertions, deletions and substitutions -- the deletions column is where an
end-of-utterance deletion problem shows.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path

import torch

from asrkit.config import load_config
from asrkit.data.lists import read_list
from asrkit.data.processors import build_sample_processor
from asrkit.decode import DecodingOptionError, DecodingOptions
from asrkit.decode.ctc_search import DEFAULT_BLANK_SKIP_THRESHOLD
from asrkit.decode.recognizer import recognize
from asrkit.trained_model import build_trained_model
from asrkit.config_files import load_text_inputs
from asrkit.metrics import score

BLANK_MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the experiment's train.yaml")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="data.list to decode (its transcripts are the reference)")
    p.add_argument("--length_penalty", type=float, nargs="*", default=[], metavar="P",
                   help="values to try in mode attention")
    p.add_argument("--blank_penalty", type=float, nargs="*", default=[], metavar="P",
                   help="values to try in the CTC modes and attention_rescoring")
    p.add_argument("--score", choices=["word", "char"], default="char")
    p.add_argument("--beam_size", type=int, default=10)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--ctc_weight", type=float, default=0.3)
    p.add_argument("--reverse_weight", type=float, default=0.0)
    p.add_argument("--blank_skip_threshold", type=float, default=DEFAULT_BLANK_SKIP_THRESHOLD)
    p.add_argument("--decoding_chunk_size", type=int, default=-1)
    p.add_argument("--num_decoding_left_chunks", type=int, default=-1)
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch default)")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.length_penalty and not args.blank_penalty:
        raise SystemExit("give --length_penalty and/or --blank_penalty values")
    common = dict(beam_size=args.beam_size, ctc_weight=args.ctc_weight, reverse_weight=args.reverse_weight,
                  blank_skip_threshold=args.blank_skip_threshold, decoding_chunk_size=args.decoding_chunk_size,
                  num_decoding_left_chunks=args.num_decoding_left_chunks, batch_size=args.batch_size)
    try:  # every row's options, checked before anything loads
        grid = [("length_penalty", v, DecodingOptions(modes=["attention"], length_penalty=v, **common))
                for v in args.length_penalty]
        grid += [("blank_penalty", v, DecodingOptions(modes=BLANK_MODES, blank_penalty=v, **common))
                 for v in args.blank_penalty]
    except DecodingOptionError as e:
        raise SystemExit(str(e))
    logging.basicConfig(level=logging.WARNING)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.override)
    tokenizer = load_text_inputs(cfg, model_cmvn=False)
    entries = read_list(args.data)
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False,
                                       labels=False)
    model = build_trained_model(cfg, args.checkpoint, tokenizer.vocabulary, args.device)
    refs = {e.key: e.txt for e in entries}
    if model.decoder is None:  # (no decoder: the blank penalty rows without attention_rescoring)
        grid = [(name, value, replace(options, modes=[m for m in options.modes if m != "attention_rescoring"]))
                for name, value, options in grid]
    label = "CER" if args.score == "char" else "WER"
    rows = []
    print(f"{'penalty':<15} {'value':>6}  {'mode':<23} {label:>7} {'ins':>5} {'del':>5} {'sub':>5}")
    for name, value, options in grid:
        results = recognize(model, entries, processor, tokenizer, options, device=args.device)
        for mode in options.modes:
            totals, _ = score(refs, results[mode], args.score)
            row = {"penalty": name, "value": value, "mode": mode, label.lower(): round(100 * totals.rate, 2),
                   "ins": totals.ins, "del": totals.dels, "sub": totals.sub, "ref_len": totals.ref_len}
            rows.append(row)
            print(f"{name:<15} {value:>6g}  {mode:<23} {100 * totals.rate:>7.2f} {totals.ins:>5} "
                  f"{totals.dels:>5} {totals.sub:>5}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
