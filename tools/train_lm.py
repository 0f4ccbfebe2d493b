#!/usr/bin/env python3
"""Estimate an n-gram language model (ARPA) from transcripts: interpolated modified
Kneser-Ney smoothing with KenLM's ``lmplz`` rules (asrkit/lm/estimate.py), for the LM fusion
of ``recognize --lm_path`` (docs/decoding.md).

    python tools/train_lm.py --order 3 [--prune 0 0 1] [--discount_fallback] \\
        data/train/text [more.txt ...] data/lm/3gram.arpa

Input: Kaldi ``text`` files (``<key> <transcript>`` per line), raw ``data.list`` files (JSON
lines; their ``txt``), or with ``--plain`` one sentence per line.  Words are those of
``asrkit.lm.words.lm_words``: whitespace-separated, every CJK character a word of its own
(a character n-gram for Chinese, which is written without spaces; a word LM of Chinese needs
a segmenter: docs/decoding.md).  ``--prune`` takes KenLM's thresholds (one per order, the
last repeated; 0 for unigrams): n-grams with an adjusted count at or below them are
dropped.  ``--discount_fallback``: where the counts of counts give no discounts (small or
artificial text: a 10-word grammar), use KenLM's fallback 0.5 1 1.5 instead of stopping.

Bad input (a missing file, no text, discounts that cannot be computed) is one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from asrkit.files import atomic_write_text
from asrkit.lm.arpa import format_arpa
from asrkit.lm.estimate import EstimateError, estimate_from_texts


def transcripts(path: Path, plain: bool):
    """The transcripts of one input file (module docstring)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if plain:
                yield line
            elif line.startswith("{"):
                yield json.loads(line).get("txt", "")
            else:
                yield line.split(maxsplit=1)[1] if " " in line or "\t" in line else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path, help="text files, then the ARPA file to write")
    p.add_argument("--order", type=int, default=3)
    p.add_argument("--prune", type=int, nargs="*", default=[], help="KenLM's --prune thresholds")
    p.add_argument("--discount_fallback", action="store_true", help="KenLM's --discount_fallback (0.5 1 1.5)")
    p.add_argument("--plain", action="store_true", help="the inputs hold one sentence per line (no keys)")
    args = p.parse_args(argv)
    if len(args.inputs) < 2:
        p.error("give the text file(s) and then the ARPA file to write")
    *sources, out = args.inputs
    try:
        for source in sources:
            if not source.is_file():
                raise EstimateError(f"text not found: {source}")
        texts = [t for source in sources for t in transcripts(source, args.plain)]
        arpa = estimate_from_texts(texts, args.order, args.prune, args.discount_fallback)
    except (EstimateError, UnicodeDecodeError, json.JSONDecodeError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, format_arpa(arpa))
    counts = " ".join(f"{n}-grams {c}" for n, c in enumerate(arpa.counts(), 1))
    print(f"{out}: order {args.order}, {len(texts)} sentences, {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
