#!/usr/bin/env python3
"""Streaming latency: how long after a word ends does a partial result show it?

    python bench/streaming_latency.py --config exp/u2pp_cpu/train.yaml \\
        --checkpoint exp/u2pp_cpu/avg_3.pt [--utterances 100] [--chunks 16 8 4] \\
        [--piece_ms 100] [--num_threads 1] [--seed 1] [--json out.json]

Test audio whose word boundaries are known: each utterance concatenates 2-4 digit words,
each synthesized alone with espeak-ng (``tools/synthesize_corpus.py``: a voice of the digits
corpus's *test* split -- voices training never heard --, random rate and pitch) and trimmed
to its sound, with 0.3 s of silence before, 0.15-0.4 s between words and 1 s after, plus
faint noise.  The end of the first word is therefore known to the sample.

Each utterance is streamed through :class:`asrkit.stream.recognizer.StreamingRecognizer`
in ``--piece_ms`` pieces, for each chunk size.  Reported per chunk size:

* **first-word latency**: the audio fed (end of the piece whose feeding returned it) when
  the first partial whose first word is the utterance's first word came out, minus the end
  of that word (median, 90th percentile; negative when the model names the word before its
  sound ends; utterances where no partial ever starts with it are counted as misses);
* compute per chunk (median, max, one stream, ``--num_threads``);
* the CER of the final results.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import synthesize_corpus as synth


def make_utterances(count: int, seed: int) -> list[dict]:
    """``count`` utterances: samples, words, and the end time (s) of the first word."""
    voices = synth.default_test_voices()
    rng = np.random.default_rng([seed, 7])
    out = []
    for _ in range(count):
        utt = synth.words_with_pauses(rng, voices, word_count=(2, 5), pause_s=(0.15, 0.4), final_pause_s=1.0)
        out.append({"samples": utt["samples"], "words": utt["words"], "first_end_s": utt["spans"][0][1],
                    "voice": utt["voice"]})
    return out


def run_chunk(model, tokenizer, utterances, chunk: int, piece_ms: float, fbank) -> dict:
    import torch

    from asrkit.data.features import fbank_options
    from asrkit.decode import DecodingOptions
    from asrkit.metrics import align
    from asrkit.stream.recognizer import StreamingRecognizer
    delays, misses, compute_ms, errors, chars = [], 0, [], 0, 0
    for utt in utterances:
        options = DecodingOptions(beam_size=10, ctc_weight=0.3, reverse_weight=getattr(model, "reverse_weight", 0.0),
                                  decoding_chunk_size=chunk, num_decoding_left_chunks=-1)
        stream = StreamingRecognizer(model, options, sample_rate=16000, **fbank_options(fbank),
                                     endpoint_rules=None)
        audio = torch.from_numpy(utt["samples"])
        piece = int(16000 * piece_ms / 1000.0)
        results = []  # (audio fed so far in s when the result came out, result)
        for start in range(0, audio.numel(), piece):
            fed = min(start + piece, audio.numel()) / 16000.0
            results += [(fed, r) for r in stream.accept_waveform(audio[start:start + piece])]
        results += [(audio.numel() / 16000.0, r) for r in stream.finish()]
        seen = None
        for fed, r in results:
            if r.final:
                continue
            compute_ms.append(r.compute_s * 1000.0)
            words = tokenizer.decode(r.tokens).split()
            if seen is None and words[:1] == utt["words"][:1]:
                seen = fed
        if seen is None:
            misses += 1
        else:
            delays.append(seen - utt["first_end_s"])
        ref = "".join(utt["words"])
        hyp = tokenizer.decode(results[-1][1].tokens).replace(" ", "")
        errors += align(list(ref), list(hyp)).errors
        chars += len(ref)
    delays.sort()
    return {"chunk": chunk, "utterances": len(utterances), "misses": misses,
            "latency_median_s": statistics.median(delays) if delays else None,
            "latency_p90_s": delays[int(0.9 * (len(delays) - 1))] if delays else None,
            "compute_median_ms": statistics.median(compute_ms), "compute_max_ms": max(compute_ms),
            "cer": 100.0 * errors / max(chars, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--utterances", type=int, default=100)
    p.add_argument("--chunks", type=int, nargs="+", default=[16, 8, 4])
    p.add_argument("--piece_ms", type=float, default=100.0)
    p.add_argument("--num_threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    import torch

    from asrkit.config import load_config
    from asrkit.trained_model import build_trained_model
    from asrkit.config_files import BAD_INPUT, load_text_inputs
    torch.set_num_threads(args.num_threads)
    try:
        cfg = load_config(args.config)
        tokenizer = load_text_inputs(cfg, model_cmvn=False)
        model = build_trained_model(cfg, args.checkpoint, tokenizer.vocabulary)
    except BAD_INPUT as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    utterances = make_utterances(args.utterances, args.seed)
    rows = [run_chunk(model, tokenizer, utterances, c, args.piece_ms, cfg.dataset_conf.fbank_conf)
            for c in args.chunks]
    print("chunk  latency median / p90 (s)  misses  compute median / max (ms)  final CER %")
    for r in rows:
        lat = (f"{r['latency_median_s']:.2f} / {r['latency_p90_s']:.2f}" if r["latency_median_s"] is not None
               else "n/a")
        print(f"{r['chunk']:5d}  {lat:>24}  {r['misses']:6d}  {r['compute_median_ms']:8.1f} / "
              f"{r['compute_max_ms']:6.1f}  {r['cer']:10.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
