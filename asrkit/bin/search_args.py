"""The search options ``recognize`` and ``asrkit transcribe`` share -- the transducer modes'
weights, LM fusion and contextual biasing (docs/decoding.md) -- as command-line arguments
and as the :class:`asrkit.decode.DecodingOptions` fields they set, whose defaults they take
(:data:`asrkit.decode.options.DEFAULTS`).  No torch import at parse time (``asrkit
transcribe --help`` stays fast)."""
from __future__ import annotations

import argparse

from asrkit.decode.options import DEFAULTS


def add_search_args(p: argparse.ArgumentParser, fused_modes: str = "") -> None:
    """The shared options; ``fused_modes``: the modes the LM reaches, for its help line."""
    p.add_argument("--search_ctc_weight", type=float, default=DEFAULTS["search_ctc_weight"],
                   help="rnnt_beam_search (and rnnt_beam_attn_rescoring's n-best): weight of CTC probabilities")
    p.add_argument("--search_transducer_weight", type=float, default=DEFAULTS["search_transducer_weight"],
                   help="rnnt_beam_search: weight of the joint's probabilities")
    p.add_argument("--transducer_weight", type=float, default=DEFAULTS["transducer_weight"],
                   help="rnnt_beam_attn_rescoring, ctc_beam_td_attn_rescoring: weight of the RNN-T log-likelihood "
                        "(ctc_weight weighs the search score there)")
    p.add_argument("--attn_weight", type=float, default=DEFAULTS["attn_weight"],
                   help="rnnt_beam_attn_rescoring, ctc_beam_td_attn_rescoring: weight of the attention score")
    p.add_argument("--lm_path", default=DEFAULTS["lm_path"],
                   help="ARPA n-gram LM of words (tools/train_lm.py) fused into the prefix/beam searches and the "
                        "rescoring n-best" + (f" (modes: {fused_modes})" if fused_modes else ""))
    p.add_argument("--lm_weight", type=float, default=DEFAULTS["lm_weight"],
                   help="with --lm_path: weight of the LM's log-probability of each completed word "
                        "(tools/tune_fusion.py chooses it on a dev set)")
    p.add_argument("--word_bonus", type=float, default=DEFAULTS["word_bonus"],
                   help="with --lm_path: score added per word")
    p.add_argument("--lm_oov_penalty", type=float, default=DEFAULTS["lm_oov_penalty"],
                   help="with --lm_path: subtracted from the LM's log-probability of a word it does not know")
    p.add_argument("--context_bias_mode", default=DEFAULTS["context_bias_mode"],
                   choices=["", "decoding-graph", "deep-biasing"],
                   help="WeNet's: decoding-graph biases towards --context_list_path's phrases (the default "
                        "when a list is given); deep-biasing needs a model asrkit does not train")
    p.add_argument("--context_list_path", default=None,
                   help="phrases (one per line) to bias recognition towards: a context graph (WeNet's)")
    p.add_argument("--context_graph_score", type=float, default=DEFAULTS["context_graph_score"],
                   help="bonus per matched unit of a phrase, taken back when the path leaves it")
    p.add_argument("--context_strict", choices=["true", "false"], default=str(DEFAULTS["context_strict"]).lower(),
                   help="false: sherpa-onnx's non-strict phrase matching (its hotwords), back to the root after a "
                        "completed phrase")


def search_options(args: argparse.Namespace) -> dict:
    """The :class:`DecodingOptions` fields of :func:`add_search_args`' arguments; reads the
    phrase list (``asrkit.decode.context_graph.ContextListError`` when it is unusable)."""
    from asrkit.decode.context_graph import read_phrase_list  # (deferred: torch)
    return dict(search_ctc_weight=args.search_ctc_weight, search_transducer_weight=args.search_transducer_weight,
                transducer_weight=args.transducer_weight, attn_weight=args.attn_weight,
                lm_path=args.lm_path, lm_weight=args.lm_weight, word_bonus=args.word_bonus,
                lm_oov_penalty=args.lm_oov_penalty, context_bias_mode=args.context_bias_mode,
                context_graph_score=args.context_graph_score, context_strict=args.context_strict == "true",
                context_phrases=(read_phrase_list(args.context_list_path)
                                 if args.context_list_path is not None else ()))
