#!/usr/bin/env python3
"""Choose the LM fusion weights (and the context-graph score) on a dev set, by measurement:
the error rate of one decoding mode over a grid of ``--lm_weight`` x ``--word_bonus`` (x
``--context_graph_score`` with phrases), plus the row without fusion.

    python tools/tune_fusion.py --config exp/x/train.yaml --checkpoint exp/x/avg_3.pt \\
        --data data/dev/data.list --mode ctc_prefix_beam_search --lm_path data/lm/lm.arpa \\
        --lm_weight 0.1 0.3 0.5 0.8 --word_bonus 0 1 2 [--context_list_path phrases.txt \\
        --context_graph_score 1 2 3] [--score word] [--beam_size 10] [--json rows.json]

The encoder runs once per batch; every grid point then runs only the search (and, for
``attention_rescoring``, the decoder over its n-best) -- the same code as ``recognize``, so
a row is what ``recognize`` scores with those options.  Prints one row per point (error
rate, insertions, deletions, substitutions) and last the best point as ``recognize``
options (ties: the first in the grid, i.e. the smaller weights).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import sys

import torch

from asrkit.config import load_config
from asrkit.data.lists import read_list
from asrkit.data.processors import build_sample_processor
from asrkit.decode import DecodingOptionError, DecodingOptions, ModeError
from asrkit.decode.batch import encoder_output
from asrkit.decode.context_graph import ContextListError, read_phrase_list
from asrkit.decode.fusion import Fusion
from asrkit.decode.modes import REGISTRY, check_modes
from asrkit.decode.options import DEFAULTS, build_fusion
from asrkit.decode.recognizer import duration_batches
from asrkit.trained_model import build_trained_model
from asrkit.decode.searcher import Searcher
from asrkit.decode.shared import SharedOutputs
from asrkit.config_files import load_text_inputs
from asrkit.files import atomic_write_text
from asrkit.lm.arpa import ArpaError
from asrkit.metrics import score


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="dev data.list (its transcripts are the reference)")
    p.add_argument("--mode", default="ctc_prefix_beam_search")
    p.add_argument("--lm_path", default=None)
    p.add_argument("--lm_weight", type=float, nargs="+", default=[DEFAULTS["lm_weight"]])
    p.add_argument("--word_bonus", type=float, nargs="+", default=[DEFAULTS["word_bonus"]])
    p.add_argument("--lm_oov_penalty", type=float, default=DEFAULTS["lm_oov_penalty"])
    p.add_argument("--context_list_path", default=None)
    p.add_argument("--context_graph_score", type=float, nargs="+", default=[DEFAULTS["context_graph_score"]])
    p.add_argument("--score", choices=["word", "char"], default="word")
    p.add_argument("--beam_size", type=int, default=DEFAULTS["beam_size"])
    p.add_argument("--batch_size", type=int, default=DEFAULTS["batch_size"])
    p.add_argument("--ctc_weight", type=float, default=DEFAULTS["ctc_weight"])
    p.add_argument("--reverse_weight", type=float, default=DEFAULTS["reverse_weight"])
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--device", default="cpu")
    p.add_argument("--num_threads", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    p.add_argument("--best_args", default=None,
                   help="write the best point's recognize options to this file (one line; the recipes' stage)")
    return p.parse_args(argv)


def grid(args) -> list[DecodingOptions]:
    """The options of every grid point, the one without fusion first (checked before loading)."""
    common = dict(modes=(args.mode,), beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                  reverse_weight=args.reverse_weight, batch_size=args.batch_size)
    phrases = read_phrase_list(args.context_list_path) if args.context_list_path else ()
    points = [DecodingOptions(**common)]
    weights = (list(itertools.product(args.lm_weight, args.word_bonus)) if args.lm_path
               else [(DEFAULTS["lm_weight"], DEFAULTS["word_bonus"])])
    scores = args.context_graph_score if phrases else [DEFAULTS["context_graph_score"]]
    for (weight, bonus), context_score in itertools.product(weights, scores):
        points.append(DecodingOptions(**common, lm_path=args.lm_path, lm_weight=weight, word_bonus=bonus,
                                      lm_oov_penalty=args.lm_oov_penalty, context_phrases=phrases,
                                      context_graph_score=context_score))
    if len(points) == 1:
        raise DecodingOptionError("give --lm_path and/or --context_list_path")
    return points


def encode_all(model, entries, processor, options, device):
    """Per batch: the utterance keys and the shared outputs of one encoder pass (CTC
    log-probabilities computed), for the utterances long enough for the encoder."""
    out = []
    for indices in duration_batches(entries, options.batch_size):
        batch = processor.collate([processor(entries[i], 0) for i in indices])
        keep = (batch["feats_lengths"] >= model.encoder.min_input_length).nonzero().flatten()
        if keep.numel() == 0:
            continue
        lengths = batch["feats_lengths"][keep]
        feats = batch["feats"][keep][:, : int(lengths.max())].to(device)
        with torch.inference_mode():
            enc, enc_lengths = encoder_output(model, feats, lengths.to(device), options)
            shared = SharedOutputs.from_options(Searcher.of_model(model), enc, enc_lengths, options, model)
            if shared.searcher.has_ctc():
                shared.log_probs()
        out.append(([batch["keys"][i] for i in keep.tolist()], shared))
    return out


def decode_point(batches, options: DecodingOptions, fusion: Fusion, tokenizer) -> dict[str, str]:
    texts = {}
    mode = options.modes[0]
    with torch.inference_mode():
        for keys, shared in batches:
            point = dataclasses.replace(shared, fusion=fusion, _nbest=None, _fusion_scores=None,
                                        ctc_weight=options.ctc_weight)
            for key, ids in zip(keys, REGISTRY[mode].run(point)):
                texts[key] = tokenizer.decode(ids)
    return texts


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        points = grid(args)
        if args.num_threads > 0:
            torch.set_num_threads(args.num_threads)
        cfg = load_config(args.config, args.override)
        tokenizer = load_text_inputs(cfg, model_cmvn=False)
        fusions = [build_fusion(options, tokenizer) for options in points]
        entries = read_list(args.data)
        processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False,
                                           labels=False)
        model = build_trained_model(cfg, args.checkpoint, tokenizer.vocabulary, args.device)
        check_modes(model, [args.mode])
    except (DecodingOptionError, ModeError, ArpaError, ContextListError, ValueError, OSError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    batches = encode_all(model, entries, processor, points[0], args.device)
    refs = {e.key: e.txt for e in entries}
    label = "CER" if args.score == "char" else "WER"
    print(f"{'lm_weight':>9} {'word_bonus':>10} {'context':>7} {label:>7} {'ins':>5} {'del':>5} {'sub':>5}")
    rows = []
    for options, fusion in zip(points, fusions):
        totals, _ = score(refs, decode_point(batches, options, fusion, tokenizer), args.score)
        row = {"lm_weight": options.lm_weight if options.lm_path else None,
               "word_bonus": options.word_bonus if options.lm_path else None,
               "context_graph_score": options.context_graph_score if options.context_phrases else None,
               label.lower(): round(100 * totals.rate, 2), "ins": totals.ins, "del": totals.dels, "sub": totals.sub}
        rows.append(row)
        shown = ["-" if row[k] is None else f"{row[k]:g}" for k in ("lm_weight", "word_bonus", "context_graph_score")]
        print(f"{shown[0]:>9} {shown[1]:>10} {shown[2]:>7} {100 * totals.rate:>7.2f} {totals.ins:>5} "
              f"{totals.dels:>5} {totals.sub:>5}", flush=True)
    best = min(range(1, len(rows)), key=lambda i: rows[i][label.lower()])
    chosen = points[best]
    flags = ([f"--lm_path {chosen.lm_path} --lm_weight {chosen.lm_weight:g} --word_bonus {chosen.word_bonus:g} "
              f"--lm_oov_penalty {chosen.lm_oov_penalty:g}"] if chosen.lm_path else [])
    flags += [f"--context_graph_score {chosen.context_graph_score:g}"] if chosen.context_phrases else []
    print(f"best ({args.mode}, {label} {rows[best][label.lower()]:.2f}, without fusion {rows[0][label.lower()]:.2f}): "
          + " ".join(flags))
    if args.json:
        atomic_write_text(args.json, json.dumps({"mode": args.mode, "rows": rows, "best": rows[best]}, indent=1) + "\n")
    if args.best_args:
        atomic_write_text(args.best_args, " ".join(flags) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
