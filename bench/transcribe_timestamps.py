#!/usr/bin/env python3
"""Word-time accuracy of ``asrkit.load_model(...).transcribe``: how many word start times
lie within ``--tolerance`` (0.2 s) of where the word really starts?

    python bench/transcribe_timestamps.py --model exp/conformer [--override KEY=VALUE ...] \\
        [--utterances 20] [--modes ctc_greedy_search attention_rescoring ...] [--chunk N] \\
        [--num_threads 1] [--seed 3] [--json out.json]

Test audio whose word starts are known to the sample: each utterance concatenates 3-6
digit words, each synthesized alone with espeak-ng (``tools/synthesize_corpus.py``: one
voice of the digits corpus's *test* split -- voices training never heard -- per
utterance, random rate and pitch) and trimmed to its sound, with 0.3 s of silence
before the first, 0.3-0.8 s between words and 0.5 s after the last, plus faint noise.
A word's true start is the first sample of its trimmed synthesis.

Per mode, the hypothesis words are aligned to the reference words (minimum edit
distance); a reference word is **on time** when the hypothesis word aligned to it (the
same word or a substitute) starts within ``--tolerance`` of its true start.  Reported:
the share of reference words on time (deleted words count as not on time), the share
among correctly recognised words only, the median and 90th percentile of
``|start error|`` over aligned words, and the WER.  Because a missing word boundary (the
``▁`` unit) merges two words into one wrong word, a second figure scores the token times
apart from the word grouping: the characters of the hypothesis tokens (each with its
token's start) are aligned to the reference characters, and a reference word's start is
**on time by its first character** when that character is aligned to the same character
of the hypothesis starting within the tolerance.

Each mode runs twice: decoded whole (``Segmentation.whole()``, as ``recognize`` decodes an
utterance), and with the default segmentation (``Segmentation()``: cut at the pauses the
voice-activity detector finds and decoded part by part; what ``asrkit transcribe`` does) --
models trained on connected digits (no pauses inside an utterance) lose words and word
boundaries across pauses this long, and cutting there removes the pauses from what they
decode.  Rows with the default are marked ``*`` and ``"default": true`` in the JSON.
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

SAMPLE_RATE = 16000
MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")


def make_utterances(count: int, seed: int) -> list[dict]:
    """``count`` utterances: ``samples`` (float32, 16 kHz), ``words`` and ``starts`` (s)."""
    voices = synth.default_test_voices()
    rng = np.random.default_rng([seed, 11])
    out = []
    for _ in range(count):
        utt = synth.words_with_pauses(rng, voices, word_count=(3, 7), pause_s=(0.3, 0.8), final_pause_s=0.5)
        out.append({"samples": utt["samples"], "words": utt["words"], "starts": [a for a, _ in utt["spans"]],
                    "voice": utt["voice"]})
    return out


def first_char_hits(results: list, utterances: list[dict], tolerance: float) -> int:
    """Reference words whose first character is aligned to an equal hypothesis character
    (of a token starting within ``tolerance`` of the word)."""
    from asrkit.metrics import align
    hits = 0
    for result, utt in zip(results, utterances):
        ref = [(ch, i if k == 0 else None) for i, w in enumerate(utt["words"]) for k, ch in enumerate(w)]
        hyp = [(ch, t.start) for t in (result.token_times or []) for ch in t.token.replace("\u2581", "")]
        alignment = align([c for c, _ in ref], [c for c, _ in hyp])
        i = j = 0
        for r, h in alignment.pairs:
            if r is not None and h is not None and r == h and ref[i][1] is not None:
                hits += abs(hyp[j][1] - utt["starts"][ref[i][1]]) <= tolerance
            i += r is not None
            j += h is not None
    return hits


def score_mode(results: list, utterances: list[dict], tolerance: float) -> dict:
    """The figures of the module docstring for one mode's transcripts."""
    from asrkit.metrics import align
    on_time = on_time_correct = correct = total = errors = 0
    deviations: list[float] = []
    for result, utt in zip(results, utterances):
        hyp = result.words or []
        alignment = align(utt["words"], [w.word for w in hyp])
        errors += alignment.errors
        total += len(utt["words"])
        i = j = 0
        for ref_word, hyp_word in alignment.pairs:
            if ref_word is not None and hyp_word is not None:
                deviation = abs(hyp[j].start - utt["starts"][i])
                deviations.append(deviation)
                on_time += deviation <= tolerance
                if ref_word == hyp_word:
                    correct += 1
                    on_time_correct += deviation <= tolerance
            i += ref_word is not None
            j += hyp_word is not None
    first_chars = first_char_hits(results, utterances, tolerance)
    deviations.sort()
    return {"words": total, "on_time_first_char_pct": 100.0 * first_chars / max(total, 1),
            "on_time_pct": 100.0 * on_time / max(total, 1),
            "on_time_correct_pct": 100.0 * on_time_correct / max(correct, 1),
            "median_abs_error_s": statistics.median(deviations) if deviations else None,
            "p90_abs_error_s": deviations[int(0.9 * (len(deviations) - 1))] if deviations else None,
            "wer": 100.0 * errors / max(total, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="experiment directory or final.zip")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--utterances", type=int, default=20)
    p.add_argument("--modes", nargs="+", default=list(MODES))
    p.add_argument("--chunk", type=int, default=None)
    p.add_argument("--tolerance", type=float, default=0.2)
    p.add_argument("--num_threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    import torch

    from asrkit.config_files import BAD_INPUT
    from asrkit.transcribe import ModelLoadError, Segmentation, load_model
    torch.set_num_threads(args.num_threads)
    try:
        model = load_model(args.model, args.checkpoint, overrides=args.override)
    except (ModelLoadError, *BAD_INPUT) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    utterances = make_utterances(args.utterances, args.seed)
    setups = [("whole", Segmentation.whole()), ("cut at pauses (VAD)", Segmentation())]
    rows = []
    for mode in args.modes:
        for name, segmentation in setups:
            results = [model.transcribe(u["samples"], SAMPLE_RATE, mode=mode, chunk=args.chunk,
                                        segmentation=segmentation) for u in utterances]
            rows.append({"mode": mode, "decoding": name, "chunk": args.chunk,
                         "default": segmentation == Segmentation(),
                         **score_mode(results, utterances, args.tolerance)})
    print(f"{model.description}: {len(utterances)} utterances, {rows[0]['words']} words, "
          f"tolerance {args.tolerance:g} s, chunk {args.chunk or 'full context'}; "
          f"* = the default segmentation (what asrkit transcribe does)")
    print("mode                     decoding              on time %  (of correct words)  (by first char)  "
          "|error| median / p90 (s)   WER %")
    for r in rows:
        med = ("n/a" if r["median_abs_error_s"] is None
               else f"{r['median_abs_error_s']:.3f} / {r['p90_abs_error_s']:.3f}")
        decoding = r["decoding"] + (" *" if r["default"] else "")
        print(f"{r['mode']:24s} {decoding:20s} {r['on_time_pct']:9.1f}  {r['on_time_correct_pct']:18.1f}  "
              f"{r['on_time_first_char_pct']:15.1f}  {med:>24}  {r['wer']:6.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
