#!/usr/bin/env python3
"""Score a hypothesis ``text`` file against a reference ``text`` file (Kaldi format:
``key transcript`` per line).

Prints one alignment block per utterance (unless ``--summary-only``), then the totals:

    %WER 12.50 [ 2 / 16, 1 ins, 0 del, 1 sub ]
    %SER 50.00 [ 1 / 2 ]

``--mode char`` scores characters (CER; spaces excluded unless ``--keep-spaces``); in
``word`` mode every CJK character counts as one word.  A reference key missing from the
hypotheses is scored as an empty hypothesis (and counted in a note); a hypothesis key
missing from the reference is an error.

Usage: tools/compute_wer.py [--mode word|char] [--ignore-case] [--remove-punct]
                            [--keep-spaces] [--summary-only] REF HYP
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asrkit.metrics import Normalizer, format_alignment, read_text, score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", type=Path, help="reference text file")
    parser.add_argument("hyp", type=Path, help="hypothesis text file")
    parser.add_argument("--mode", choices=["word", "char"], default="word",
                        help="word: WER (CJK characters count as words); char: CER")
    parser.add_argument("--keep-spaces", action="store_true", help="char mode: count spaces as characters")
    parser.add_argument("--ignore-case", action="store_true", help="case-insensitive comparison")
    parser.add_argument("--remove-punct", action="store_true", help="drop punctuation before scoring")
    parser.add_argument("--summary-only", action="store_true", help="print only the totals")
    args = parser.parse_args(argv)
    try:
        refs = read_text(args.ref.read_text(encoding="utf-8").splitlines(), str(args.ref))
        hyps = read_text(args.hyp.read_text(encoding="utf-8").splitlines(), str(args.hyp))
        totals, details = score(refs, hyps, args.mode, args.keep_spaces,
                                Normalizer(args.ignore_case, args.remove_punct))
    except (OSError, ValueError) as e:
        print(f"compute_wer.py: error: {e}", file=sys.stderr)
        return 1
    label = "CER" if args.mode == "char" else "WER"
    if not args.summary_only:
        for key, alignment in details:
            print(format_alignment(key, alignment, label))
    missing = len(set(refs) - set(hyps))
    if missing:
        print(f"note: {missing} reference utterance(s) have no hypothesis (scored as empty)")
    print(totals.summary(label))
    print(totals.sentence_summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
