#!/usr/bin/env python3
"""Mean ± standard deviation over several runs (seeds) of the scores a recipe wrote.

    tools/seed_summary.py exp/conformer_cpu_seed1 exp/conformer_cpu_seed2 exp/conformer_cpu_seed3

Reads every ``<dir>/decode_<set>[_suffix]/<mode>/cer`` (the Kaldi-style totals line
``%CER 1.23 [ ... ]`` that ``tools/score_decodes.py`` writes) of each run directory and
prints one markdown table: a row per decode directory (test set, chunk size, ``_ema``...)
and mode, the CER of each run, their mean and sample standard deviation (n − 1; 0 for one
run).  A decode that some runs lack is shown as ``-`` and left out of the mean (and the row
says how many runs it holds).  ``--out FILE`` also writes the table there.  Exit 1 when no
run has a score.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.score_decodes import mode_key


def read_total(cer: Path, kind: str = "CER") -> Optional[float]:
    """The last ``%<kind>`` total (``CER`` or ``SER``) of a ``cer`` file
    ``tools/score_decodes.py`` wrote, or None (no such file or line)."""
    if not cer.is_file():
        return None
    found = re.findall(rf"^%{kind}\s+([0-9.]+)", cer.read_text(encoding="utf-8"), re.MULTILINE)
    return float(found[-1]) if found else None


def read_scores(run_dir: Path) -> dict[tuple[str, str], float]:
    """``{(decode dir name, mode): CER %}`` of one run directory."""
    scores = {}
    for cer in sorted(run_dir.glob("decode_*/*/cer")):
        value = read_total(cer)
        if value is not None:
            scores[(cer.parent.parent.name, cer.parent.name)] = value
    return scores


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def table(runs: list[Path]) -> str:
    per_run = [read_scores(r) for r in runs]
    rows = sorted({k for s in per_run for k in s},
                  key=lambda k: (k[0], *mode_key(k[1])))
    if not rows:
        return ""
    names = [r.name for r in runs]
    lines = ["| decode | mode | " + " | ".join(names) + " | mean ± sd (CER %) |",
             "| --- | --- | " + " | ".join("---:" for _ in names) + " | ---: |"]
    for decode, mode in rows:
        values = [s.get((decode, mode)) for s in per_run]
        have = [v for v in values if v is not None]
        mean, sd = mean_sd(have)
        note = "" if len(have) == len(runs) else f" ({len(have)} of {len(runs)} runs)"
        cells = " | ".join("-" if v is None else f"{v:.2f}" for v in values)
        lines.append(f"| {decode.removeprefix('decode_')} | {mode} | {cells} | {mean:.2f} ± {sd:.2f}{note} |")
    return "\n".join(lines) + "\n"


def emit(text: str, out: Optional[Path]) -> None:
    """Print a table, and write it to ``out`` too when given (its folder made)."""
    print(text, end="")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories (one per seed)")
    p.add_argument("--out", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)
    text = table(args.runs)
    if not text:
        print(f"error: no decode_*/<mode>/cer under {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 1
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
