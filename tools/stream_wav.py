#!/usr/bin/env python3
"""Recognize WAV files as streams: feed each in pieces (default 100 ms) to a
:class:`asrkit.stream.recognizer.StreamingRecognizer` and print every partial result with
the audio time it appeared at and the compute time of its chunk, then the final result of
each segment (segments end at endpoints: 1 s of silence after speech, 5 s of silence,
20 s of segment).

    python tools/stream_wav.py --config exp/u2pp/train.yaml --checkpoint exp/u2pp/avg_5.pt \\
        [--chunk_size 16] [--num_left_chunks -1] [--piece_ms 100] [--num_threads 1] \\
        [--lm_path LM.arpa --lm_weight W --word_bonus B] [--context_list_path PHRASES] WAV...

Output lines (tab-separated): ``<wav>  partial|final  <audio s>  <compute ms>  <text>``,
then per file the median and maximum compute per chunk.  Bad input (a missing file, an
unreadable WAV, a config or checkpoint problem, a decoding option out of range, a model
trained with full context only, which chunks would garble) is one line on
stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import soundfile
import torch

from asrkit.config import load_config
from asrkit.data.features import fbank_options
from asrkit.decode.context_graph import ContextListError, read_phrase_list
from asrkit.decode.options import DEFAULTS, DecodingOptionError, DecodingOptions, build_fusion, check_encoder_context
from asrkit.trained_model import build_trained_model
from asrkit.config_files import BAD_INPUT, load_text_inputs
from asrkit.lm.arpa import ArpaError
from asrkit.models.chunks import ChunkTraining
from asrkit.stream.recognizer import StreamingRecognizer


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the experiment's train.yaml")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--chunk_size", type=int, default=16, help="encoder frames per chunk")
    p.add_argument("--num_left_chunks", type=int, default=DEFAULTS["num_decoding_left_chunks"],
                   help="attention cache in chunks (-1: all)")
    p.add_argument("--piece_ms", type=float, default=100.0, help="audio fed per call")
    p.add_argument("--beam_size", type=int, default=DEFAULTS["beam_size"])
    p.add_argument("--ctc_weight", type=float, default=DEFAULTS["ctc_weight"])
    p.add_argument("--reverse_weight", type=float, default=DEFAULTS["reverse_weight"])
    p.add_argument("--lm_path", default=None, help="ARPA word LM fused into the search (docs/decoding.md)")
    p.add_argument("--lm_weight", type=float, default=DEFAULTS["lm_weight"])
    p.add_argument("--word_bonus", type=float, default=DEFAULTS["word_bonus"])
    p.add_argument("--context_list_path", default=None, help="phrases to bias this stream towards")
    p.add_argument("--context_graph_score", type=float, default=DEFAULTS["context_graph_score"])
    p.add_argument("--num_threads", type=int, default=1)
    p.add_argument("wavs", nargs="+", type=Path)
    return p.parse_args(argv)


def decoding_options(args) -> DecodingOptions:
    """The decoding options of the command line (checked as they are built;
    :class:`StreamingRecognizer` refuses a ``--chunk_size`` below 1)."""
    return DecodingOptions(modes=("attention_rescoring",), beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                           reverse_weight=args.reverse_weight, decoding_chunk_size=args.chunk_size,
                           num_decoding_left_chunks=args.num_left_chunks, lm_path=args.lm_path,
                           lm_weight=args.lm_weight, word_bonus=args.word_bonus,
                           context_phrases=(read_phrase_list(args.context_list_path)
                                            if args.context_list_path else ()),
                           context_graph_score=args.context_graph_score)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.num_threads)
    try:
        options = decoding_options(args)
        cfg = load_config(args.config)
        check_encoder_context(options, ChunkTraining.from_config(cfg).chunked)  # (a full-context model garbles)
        tokenizer = load_text_inputs(cfg, model_cmvn=False)
        fusion = build_fusion(options, tokenizer)  # (one per stream; here every file biases alike)
        model = build_trained_model(cfg, args.checkpoint, tokenizer.vocabulary)
        missing = [str(w) for w in args.wavs if not w.is_file()]
        if missing:
            raise FileNotFoundError(f"no such WAV: {', '.join(missing)}")
    except (*BAD_INPUT, DecodingOptionError, ArpaError, ContextListError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    fbank = cfg.dataset_conf.fbank_conf
    for wav in args.wavs:
        try:
            samples, rate = soundfile.read(wav, dtype="float32", always_2d=True)
        except (RuntimeError, soundfile.LibsndfileError) as e:
            print(f"error: {wav}: not a readable audio file ({e})", file=sys.stderr)
            return 2
        try:
            stream = StreamingRecognizer(model, options, sample_rate=rate, fusion=fusion, **fbank_options(fbank))
        except DecodingOptionError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        audio = torch.from_numpy(samples[:, 0].copy())
        piece = max(1, int(rate * args.piece_ms / 1000.0))
        chunk_ms: list[float] = []
        results = []
        for start in range(0, audio.numel(), piece):
            results += stream.accept_waveform(audio[start:start + piece])
        results += stream.finish()
        for r in results:
            if not r.final:
                chunk_ms.append(r.compute_s * 1000.0)
            print(f"{wav.name}\t{'final' if r.final else 'partial'}\t{r.audio_s:.2f}\t{r.compute_s * 1000.0:.1f}\t"
                  f"{tokenizer.decode(r.tokens)}")
        if chunk_ms:
            print(f"{wav.name}\tcompute per chunk: median {statistics.median(chunk_ms):.1f} ms, "
                  f"max {max(chunk_ms):.1f} ms over {len(chunk_ms)} chunks", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
