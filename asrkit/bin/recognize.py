"""Decode a data list with a trained model, in one or more modes.

    python -m asrkit.bin.recognize --config exp/conformer/train.yaml \\
        --checkpoint exp/conformer/avg_10.pt --data data/test/data.list \\
        --modes ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring \\
        --result_dir exp/conformer/decode_test [--beam_size 10] [--batch_size 16] \\
        [--ctc_weight 0.3] [--reverse_weight 0.0] [--length_penalty 0] [--blank_penalty 0] \\
        [--decoding_chunk_size 16 [--num_decoding_left_chunks 4] [--simulate_streaming]] [--score char]

Writes ``<result_dir>/<mode>/text`` (Kaldi ``key transcript``) for every mode; the
encoder runs once per batch for all modes.  ``--decoding_chunk_size N`` (> 0) decodes as
a streaming model would: every encoder frame sees its chunk of N frames and
``--num_decoding_left_chunks`` chunks before it (-1: all); ``--simulate_streaming`` runs
the encoder chunk by chunk with its caches, one utterance at a time (same result, the
streaming code path).  The text files hold the decoded utterances; one that cannot be
decoded (unreadable audio, shorter than the model's shortest input, ...) is skipped,
logged with its reason and counted.  With ``--score word|char`` it also writes
``<result_dir>/<mode>/wer`` (:func:`asrkit.decode.recognizer.write_scores`): the decoded utterances that have a
transcript scored against it (tools/compute_wer.py's format), then one line saying what
was not scored -- the skipped utterances by reason and those without a transcript (a list
may leave out ``txt``: an unlabelled list decodes; it has nothing to score, which is logged
instead of a score).  Relative paths of ``--config`` are found as ``asrkit transcribe``
finds them (:func:`asrkit.config_files.load_experiment_config`), and ``--dtype bf16`` on a CPU
without native bf16 logs training's warning (:func:`asrkit.precision.decoding_precision_warning`).
Progress lines report the real-time factor (wall time / audio time; "model" counts only
encoder and searches).  Exit status 0 on success, 1 on a clear error, 2 on bad usage --
including a data list that repeats a key or has a key that is not a Kaldi token
(``asrkit.data.lists``), a mode the model cannot run (e.g. ``attention`` on a CTC-only model) and
decoding options out of range or not fitting together (``--simulate_streaming`` without
a chunk size, a negative penalty, ``--decoding_chunk_size`` below -1,
``--num_decoding_left_chunks`` below -1, ``--batch_size`` or ``--beam_size`` below 1,
``--ctc_weight`` or ``--reverse_weight`` outside [0, 1]), refused with one line before
anything loads, and ``--decoding_chunk_size N > 0`` for a model trained with full context
only (no ``use_dynamic_chunk``, no ``static_chunk_size``: chunks would garble its output),
refused before the model is built.

LM fusion and contextual biasing (docs/decoding.md): ``--lm_path LM.arpa [--lm_weight W]
[--word_bonus B]`` and WeNet's ``--context_bias_mode decoding-graph --context_list_path
PHRASES [--context_graph_score S]`` apply to the modes that extend hypotheses unit by unit
(CTC prefix beam search and its n-best for attention rescoring, the transducer beam
searches); an ARPA file that is truncated or not ARPA, an empty phrase list or a phrase
spelled with units the model lacks is refused in one line, status 2, before the model is
built.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from asrkit.bin.exit_status import run_tool
from asrkit.bin.search_args import add_search_args, search_options
from asrkit.lm.arpa import ArpaError
from asrkit.data.lists import read_list
from asrkit.data.processors import build_sample_processor
from asrkit.decode import MODES, DecodingOptionError, DecodingOptions, ModeError
from asrkit.decode.context_graph import ContextListError
from asrkit.decode.modes import fused_modes
from asrkit.decode.options import AUTOCAST_DTYPES, DEFAULTS, build_fusion, check_encoder_context
from asrkit.decode.recognizer import Progress, recognize, score_modes, write_text
from asrkit.models.chunks import ChunkTraining
from asrkit.precision import decoding_precision_warning
from asrkit.trained_model import open_experiment

log = logging.getLogger("asrkit.recognize")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the experiment's train.yaml")
    p.add_argument("--checkpoint", required=True, help="checkpoint (training checkpoint or bare state_dict)")
    p.add_argument("--data", required=True, help="data.list (raw, shard or WeNet shard list) to decode")
    p.add_argument("--result_dir", required=True, help="writes <result_dir>/<mode>/text")
    p.add_argument("--modes", nargs="+", default=list(DEFAULTS["modes"]), choices=MODES, metavar="MODE",
                   help=f"decoding modes, any of: {' '.join(MODES)}")
    p.add_argument("--beam_size", type=int, default=DEFAULTS["beam_size"])
    p.add_argument("--batch_size", type=int, default=DEFAULTS["batch_size"])
    p.add_argument("--ctc_weight", type=float, default=DEFAULTS["ctc_weight"],
                   help="attention_rescoring: weight of the CTC score (the transducer rescorings: of the "
                        "search score)")
    p.add_argument("--reverse_weight", type=float, default=DEFAULTS["reverse_weight"],
                   help="attention_rescoring: weight of the right-to-left decoder (bitransformer)")
    p.add_argument("--blank_skip_threshold", type=float, default=DEFAULTS["blank_skip_threshold"],
                   help="prefix beam search: frames with P(blank) above this add no new prefixes "
                        "(1.0 disables)")
    p.add_argument("--length_penalty", type=float, default=DEFAULTS["length_penalty"],
                   help="attention: rank hypotheses by score / tokens**length_penalty (WeNet's; 0: plain score)")
    p.add_argument("--blank_penalty", type=float, default=DEFAULTS["blank_penalty"],
                   help="CTC modes and attention_rescoring's n-best: subtract this from the blank logit "
                        "before the CTC searches (WeNet's; 0: none)")
    p.add_argument("--decoding_chunk_size", type=int, default=DEFAULTS["decoding_chunk_size"],
                   help="-1 or 0: full context; N > 0: chunks of N encoder frames (streaming)")
    p.add_argument("--num_decoding_left_chunks", type=int, default=DEFAULTS["num_decoding_left_chunks"],
                   help="with --decoding_chunk_size N > 0: chunks to the left each frame sees (-1: all)")
    p.add_argument("--simulate_streaming", action="store_true",
                   help="run the encoder chunk by chunk with caches (needs --decoding_chunk_size > 0)")
    add_search_args(p, " ".join(fused_modes(MODES)))
    p.add_argument("--score", choices=["word", "char"], default=None,
                   help="also score each mode against the list's transcripts (WER or CER; the decoded "
                        "utterances that have one)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value (repeatable), e.g. tokenizer_conf.symbol_table_path=...")
    p.add_argument("--dtype", choices=list(AUTOCAST_DTYPES), default=DEFAULTS["dtype"],
                   help="precision of the model passes (autocast; CTC scores stay fp32; docs/performance.md)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--num_threads", type=int, default=0, help="intra-op threads (0: torch default)")
    return p


def decoding_options(args: argparse.Namespace) -> DecodingOptions:
    """The decoding options of the command line (checked as they are built)."""
    return DecodingOptions(modes=tuple(args.modes), beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                           reverse_weight=args.reverse_weight, blank_skip_threshold=args.blank_skip_threshold,
                           length_penalty=args.length_penalty, blank_penalty=args.blank_penalty,
                           decoding_chunk_size=args.decoding_chunk_size,
                           num_decoding_left_chunks=args.num_decoding_left_chunks,
                           simulate_streaming=args.simulate_streaming, batch_size=args.batch_size,
                           dtype=args.dtype, **search_options(args))


def run(args: argparse.Namespace) -> int:
    options = decoding_options(args)  # before anything loads
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    slow = decoding_precision_warning(options.dtype, args.device)
    if slow:
        log.warning("%s", slow)
    experiment = open_experiment(args.config, args.override)  # (checked before the model is built)
    cfg, tokenizer = experiment.cfg, experiment.tokenizer
    check_encoder_context(options, ChunkTraining.from_config(cfg).chunked)
    fusion = build_fusion(options, tokenizer)  # (the LM file and the phrases' units)
    # (keys checked; txt optional: audio nobody transcribed decodes. A WeNet shard list's index, if not cached)
    entries = read_list(args.data, cache_dir=args.result_dir, require_txt=False)
    unlabelled = sum(e.txt is None for e in entries)
    if unlabelled:
        log.info("%s: %d of %d utterances have no transcript (no txt): decoded, not scored", args.data,
                 unlabelled, len(entries))
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False,
                                       labels=False)
    model = experiment.load_model(args.checkpoint, args.device).model
    progress = Progress()
    results = recognize(model, entries, processor, tokenizer, options, device=args.device, progress=progress,
                        fusion=fusion)
    result_dir = Path(args.result_dir)
    for mode, texts in results.items():
        write_text(result_dir / mode / "text", texts)
    if args.score:
        score_modes(result_dir, entries, results, args.score, progress.skips)
    print(f"RTF {progress.rtf:.4f} (model {progress.model_rtf:.4f}) over {progress.audio_s:.1f} s of audio, "
          f"{progress.utts} utterances decoded, {progress.skips.summary()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_tool(run, build_parser().parse_args(argv), log,
                    bad_input=(ModeError, DecodingOptionError, ArpaError, ContextListError))


if __name__ == "__main__":
    sys.exit(main())
