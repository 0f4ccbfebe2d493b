#!/usr/bin/env python3
"""WER of decodes on the test sentences the LM's text holds verbatim and on those it does
not: what an n-gram LM of the training transcripts buys beyond memorising them.

    python tools/lm_split_wer.py --lm_text data/train/text --ref data/test/text \\
        --hyp "no LM=exp/x/decode_test/ctc_prefix_beam_search/text" \\
        --hyp "3-gram=exp/x/decode_test_lm/ctc_prefix_beam_search/text" [--json rows.json]

``--lm_text``: what the LM was estimated from, a Kaldi ``text`` file (``key words``) or plain
sentences (``--lm_text_plain``).  A test sentence "occurs" when its words, compared after
asrkit's scoring normalisation (``asrkit.metrics.tokenize``: case and spacing as scored),
equal a sentence of the LM's text.  Prints the share of test sentences that occur, then one
row per ``--hyp`` (``LABEL=PATH``): WER on all test sentences, on those that occur and on
those that do not, and the relative change of each against the first ``--hyp``.
Unreadable files: one line, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from asrkit.metrics import read_text, score, tokenize


def sentence_set(path: Path, plain: bool) -> set[tuple[str, ...]]:
    """The word tuples of the LM's sentences."""
    lines = path.read_text(encoding="utf-8").splitlines()
    texts = lines if plain else read_text(lines, str(path)).values()
    return {tuple(tokenize(t, "word")) for t in texts if t.strip()}


def split_rows(lm_sentences: set, refs: dict[str, str], hyps: list[tuple[str, dict[str, str]]]) -> dict:
    """``{"occur": n, "total": N, "rows": [{label, all, occur, unseen, ...}]}`` (WER %)."""
    seen = {k for k, t in refs.items() if tuple(tokenize(t, "word")) in lm_sentences}
    parts = {"all": refs, "occur": {k: refs[k] for k in refs if k in seen},
             "unseen": {k: refs[k] for k in refs if k not in seen}}
    rows = []
    for label, hyp in hyps:
        row: dict = {"label": label}
        for name, part in parts.items():
            totals, _ = score(part, {k: v for k, v in hyp.items() if k in part}, "word")
            row[name] = 100.0 * totals.rate if part else None
            row[f"{name}_words"] = totals.ref_len
        rows.append(row)
    return {"occur": len(seen), "total": len(refs), "rows": rows}


def relative(value, base) -> str:
    return "" if value is None or not base else f" ({100.0 * (value - base) / base:+.1f} %)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm_text", type=Path, required=True)
    p.add_argument("--lm_text_plain", action="store_true", help="--lm_text holds sentences, no keys")
    p.add_argument("--ref", type=Path, required=True, help="Kaldi text of the test set")
    p.add_argument("--hyp", action="append", required=True, metavar="LABEL=PATH")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        lm_sentences = sentence_set(args.lm_text, args.lm_text_plain)
        refs = read_text(args.ref.read_text(encoding="utf-8").splitlines(), str(args.ref))
        hyps = []
        for item in args.hyp:
            label, sep, path = item.partition("=")
            if not sep:
                raise ValueError(f"--hyp {item!r}: expected LABEL=PATH")
            hyps.append((label, read_text(Path(path).read_text(encoding="utf-8").splitlines(), path)))
        result = split_rows(lm_sentences, refs, hyps)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print(f"lm_split_wer.py: error: {e}", file=sys.stderr)
        return 2
    n, total = result["occur"], result["total"]
    print(f"{n} of {total} test sentences ({100.0 * n / max(total, 1):.1f} %) occur verbatim in {args.lm_text}\n")
    print("| decode | WER % all | WER % occurring | WER % not occurring |\n| --- | --- | --- | --- |")
    base = result["rows"][0]
    for row in result["rows"]:
        cells = [("--" if row[k] is None else f"{row[k]:.2f}") + ("" if row is base else relative(row[k], base[k]))
                 for k in ("all", "occur", "unseen")]
        print(f"| {row['label']} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
