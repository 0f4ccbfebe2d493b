#!/usr/bin/env python3
"""Leave-one-speaker-out folds: each fold's score on the speaker it never heard, their mean
and the worst fold.

    tools/fold_summary.py exp/fold_george exp/fold_jackson exp/fold_lucas exp/fold_nicolas \\
        [--isolated real_test] [--connected real_test_connected] [--out FILE]

Reads each fold directory's ``decode_<isolated>/<mode>/cer`` (the sentence error rate
``%SER``: a wrong isolated digit) and ``decode_<connected>/<mode>/cer`` (``%CER`` of the
connected utterances), the totals lines ``tools/score_decodes.py`` writes, and prints one
markdown table: a row per mode, a column pair per fold (named by its directory), the mean
over the folds and the worst fold (highest) of each.  A fold without a score shows ``-``
and is left out of its mean (the row says how many folds it holds).  ``--out FILE`` also
writes the table there.  Exit 1 when no fold has a score.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.score_decodes import mode_key
from tools.seed_summary import read_total


def summary(folds: list[Path], isolated: str, connected: str) -> str:
    modes = sorted({p.name for f in folds for d in (isolated, connected) for p in (f / f"decode_{d}").glob("*")
                    if (p / "cer").is_file()},
                   key=mode_key)
    if not modes:
        return ""
    columns = [(isolated, "SER"), (connected, "CER")]
    head = " | ".join(f"{f.name} {kind}" for f in folds for _, kind in columns)
    lines = [f"| mode | {head} | mean SER ({isolated}) | worst SER | mean CER ({connected}) | worst CER |",
             "| --- | " + " | ".join("---:" for _ in folds for _ in columns) + " | ---: | ---: | ---: | ---: |"]
    for mode in modes:
        cells, tails = [], []
        values = {kind: [] for _, kind in columns}
        for fold in folds:
            for name, kind in columns:
                v = read_total(fold / f"decode_{name}" / mode / "cer", kind)
                cells.append("-" if v is None else f"{v:.2f}")
                if v is not None:
                    values[kind].append(v)
        for _, kind in columns:
            have = values[kind]
            note = "" if len(have) == len(folds) else f" ({len(have)} of {len(folds)} folds)"
            tails += ([f"{statistics.fmean(have):.2f}{note}", f"{max(have):.2f}"] if have else ["-", "-"])
        lines.append(f"| {mode} | " + " | ".join(cells + tails) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folds", nargs="+", type=Path, help="fold experiment directories")
    p.add_argument("--isolated", default="real_test", help="the held-out speaker's isolated takes (SER)")
    p.add_argument("--connected", default="real_test_connected", help="their connected utterances (CER)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    text = summary(args.folds, args.isolated, args.connected)
    if not text:
        print(f"error: no fold has a score under decode_{args.isolated} or decode_{args.connected}", file=sys.stderr)
        return 1
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
