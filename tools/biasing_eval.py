#!/usr/bin/env python3
"""Measure contextual biasing: pick the phrases a model gets wrong, then score a decode's
recall of them and its false alarms.

    # the N reference words (or word n-grams) the plain model gets wrong most often on dev
    python tools/biasing_eval.py pick --ref data/dev/text --hyp exp/x/decode_dev/MODE/text \\
        [--top 20] [--ngram 1] > phrases.txt
    # recall and false alarms of those phrases in a decode of test (with or without biasing)
    python tools/biasing_eval.py score --ref data/test/text --hyp exp/x/decode_test_biased/MODE/text \\
        --phrases phrases.txt [--json out.json]

``pick``: utterances are aligned word by word (asrkit.metrics.align); a reference word that
is substituted or deleted counts one error for it (with ``--ngram n``, for each n-gram of
the reference that holds an error); the ``--top`` most often wrong are printed one per line,
most errors first (ties: the more frequent, then alphabetical).

``score``: per utterance and phrase, the occurrences in the reference (``ref``) and in the
hypothesis (``hyp``), as whole words; ``recalled`` = Σ min(ref, hyp), ``false alarms`` =
Σ max(0, hyp − ref) (a phrase in the hypothesis more often than the reference says).
Recall = recalled / Σ ref.  Prints a row per phrase and the totals; the overall WER of the
decode is ``tools/compute_wer.py``'s.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from asrkit.metrics import align, read_text


def words(text: str) -> list[str]:
    return text.split()


def count(phrase: list[str], seq: list[str]) -> int:
    n = len(phrase)
    return sum(seq[i:i + n] == phrase for i in range(len(seq) - n + 1))


def pick(refs: dict, hyps: dict, top: int, ngram: int) -> list[tuple[str, int, int]]:
    errors: collections.Counter = collections.Counter()
    frequency: collections.Counter = collections.Counter()
    for key, ref in refs.items():
        ref_words = words(ref)
        wrong = []  # per reference word: whether it was substituted or deleted
        for r, h in align(ref_words, words(hyps.get(key, ""))).pairs:
            if r is not None:
                wrong.append(h != r)
        for i in range(len(ref_words) - ngram + 1):
            gram = " ".join(ref_words[i:i + ngram])
            frequency[gram] += 1
            errors[gram] += any(wrong[i:i + ngram])
    ranked = sorted((g for g in errors if errors[g] > 0), key=lambda g: (-errors[g], -frequency[g], g))
    return [(g, errors[g], frequency[g]) for g in ranked[:top]]


def score_phrases(refs: dict, hyps: dict, phrases: list[str]) -> dict:
    rows = []
    for phrase in phrases:
        p = words(phrase)
        in_ref = in_hyp = recalled = false_alarms = 0
        for key, ref in refs.items():
            r, h = count(p, words(ref)), count(p, words(hyps.get(key, "")))
            in_ref, in_hyp = in_ref + r, in_hyp + h
            recalled += min(r, h)
            false_alarms += max(0, h - r)
        rows.append({"phrase": phrase, "ref": in_ref, "hyp": in_hyp, "recalled": recalled,
                     "false_alarms": false_alarms, "recall": round(100 * recalled / in_ref, 2) if in_ref else None})
    total_ref = sum(r["ref"] for r in rows)
    total = {"ref": total_ref, "recalled": sum(r["recalled"] for r in rows),
             "false_alarms": sum(r["false_alarms"] for r in rows)}
    total["recall"] = round(100 * total["recalled"] / total_ref, 2) if total_ref else None
    return {"phrases": rows, "total": total}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("pick")
    a.add_argument("--ref", required=True, type=Path)
    a.add_argument("--hyp", required=True, type=Path)
    a.add_argument("--top", type=int, default=20)
    a.add_argument("--ngram", type=int, default=1)
    b = sub.add_parser("score")
    b.add_argument("--ref", required=True, type=Path)
    b.add_argument("--hyp", required=True, type=Path)
    b.add_argument("--phrases", required=True, type=Path)
    b.add_argument("--json", default=None, type=Path)
    args = p.parse_args(argv)
    try:
        refs = read_text(open(args.ref, encoding="utf-8"), str(args.ref))
        hyps = read_text(open(args.hyp, encoding="utf-8"), str(args.hyp))
    except (OSError, ValueError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.command == "pick":
        for gram, errors, frequency in pick(refs, hyps, args.top, args.ngram):
            print(gram)
            print(f"{gram}: wrong {errors} of {frequency}", file=sys.stderr)
        return 0
    phrases = [" ".join(line.split()) for line in args.phrases.read_text(encoding="utf-8").splitlines() if line.strip()]
    result = score_phrases(refs, hyps, phrases)
    print(f"{'phrase':<24} {'ref':>5} {'hyp':>5} {'recalled':>8} {'recall%':>8} {'false alarms':>12}")
    for row in result["phrases"] + [dict(result["total"], phrase="(all)", hyp="")]:
        recall = "-" if row["recall"] is None else f"{row['recall']:.2f}"
        print(f"{row['phrase']:<24} {row['ref']:>5} {row['hyp']:>5} {row['recalled']:>8} {recall:>8} "
              f"{row['false_alarms']:>12}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
