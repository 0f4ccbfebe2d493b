#!/usr/bin/env python3
"""The encoder comparison table of docs/recipes.md from the run directories of
examples/digits/s0/local/compare_encoders.sh.

    tools/encoder_table.py exp/conformer_seed1 exp/conformer_seed2 exp/branchformer_seed1 ...

Run directories named ``<name>_seed<N>`` are grouped by ``<name>`` (one table row each, in the
order first given); a directory without the suffix is a group of its own.  Per group:

* parameters: the training log's ``model: <encoder> encoder + ... N.NN M parameters`` line
  (``<dir>/synthetic/log/rank0.log``, the first phase of a run with real speakers, else
  ``<dir>/log/rank0.log``), with the encoder's name;
* training time per epoch: from the same log, each epoch's ``epoch E: N batches per rank``
  line to its ``epoch E data: ...`` line (training, without CV), the median over the epochs,
  the mean over the seeds; and the whole training (every epoch with its CV, both phases), in
  minutes, mean over the seeds;
* CER per mode on ``--test_set``: ``<dir>/decode_<test_set>/<mode>/cer`` (tools/score_decodes.py),
  mean ± sample standard deviation over the seeds that have it (n in the last column);
* decode RTF: the last ``RTF x (model y)`` line of ``asrkit.bin.recognize`` after run.sh's
  ``decode <test_set> ... -> <dir>/decode_<test_set>`` line in ``<dir>/run_decode.log`` (all the
  modes decoded in one pass: the encoder once per batch), mean over the seeds.

A value a run lacks is left out of its mean ("-" when no run has it).  ``--out FILE`` also
writes the table there.  Exit status 1 when no directory has a score, 2 on bad usage.
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
from tools.seed_summary import emit, mean_sd, read_total

SEED = re.compile(r"^(?P<name>.+)_seed(?P<seed>\d+)$")
STAMP = r"^(\d\d):(\d\d):(\d\d) "
PARAMS = re.compile(r"model: (\S+) encoder \+ \S+ decoder, ([0-9.]+) M parameters")
EPOCH_START = re.compile(STAMP + r".*\] INFO \S+: epoch (\d+): \d+ batches per rank", re.M)
EPOCH_TRAINED = re.compile(STAMP + r".*\] INFO \S+: epoch (\d+) data", re.M)
EPOCH_SAVED = re.compile(STAMP + r".*\] INFO \S+: saved \S*epoch_(\d+)\.pt ", re.M)
DECODE = re.compile(r"stage \d+: decode \S+ \(.*\) -> (\S+)\s*$")
RTF = re.compile(r"^RTF ([0-9.]+) \(model ([0-9.]+)\)")


def group_name(run: Path) -> str:
    found = SEED.match(run.name)
    return found.group("name") if found else run.name


def train_logs(run: Path) -> list[Path]:
    """The run's rank-0 training logs: the first phase (``synthetic/``) first, if any."""
    return [p for p in (run / "synthetic" / "log" / "rank0.log", run / "log" / "rank0.log") if p.is_file()]


def _seconds(h: str, m: str, s: str) -> int:
    return int(h) * 3600 + int(m) * 60 + int(s)


def epoch_spans(text: str, end: re.Pattern) -> list[int]:
    """Seconds from each epoch's start line to its ``end`` line (the last start before it: a
    resumed epoch counts from its resumption); across midnight too."""
    starts = [(m.start(), int(m.group(4)), _seconds(*m.group(1, 2, 3))) for m in EPOCH_START.finditer(text)]
    spans = []
    for m in end.finditer(text):
        epoch, t_end = int(m.group(4)), _seconds(*m.group(1, 2, 3))
        before = [t for pos, e, t in starts if e == epoch and pos < m.start()]
        if before:
            spans.append((t_end - before[-1]) % 86400)
    return spans


def read_training(run: Path) -> dict:
    """``{"encoder", "params_m", "epoch_s", "total_min"}`` of one run (None where its logs lack them)."""
    logs = train_logs(run)
    out = {"encoder": None, "params_m": None, "epoch_s": None, "total_min": None}
    if not logs:
        return out
    first = logs[0].read_text(encoding="utf-8", errors="replace")
    found = PARAMS.search(first)
    if found:
        out["encoder"], out["params_m"] = found.group(1), float(found.group(2))
    spans = epoch_spans(first, EPOCH_TRAINED)
    if spans:
        out["epoch_s"] = statistics.median(spans)
    total = [s for log in logs for s in epoch_spans(log.read_text(encoding="utf-8", errors="replace"), EPOCH_SAVED)]
    if total:
        out["total_min"] = sum(total) / 60
    return out


def read_rtf(run: Path, test_set: str) -> Optional[float]:
    """The last RTF the decode log gives for ``decode_<test_set>`` of this run."""
    log = run / "run_decode.log"
    if not log.is_file():
        return None
    current, rtf = None, None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        found = DECODE.search(line)
        if found:
            current = Path(found.group(1)).name
            continue
        found = RTF.match(line)
        if found and current == f"decode_{test_set}":
            rtf = float(found.group(1))
    return rtf


def read_cers(run: Path, test_set: str) -> dict[str, float]:
    cers = {}
    for cer in sorted((run / f"decode_{test_set}").glob("*/cer")):
        value = read_total(cer)
        if value is not None:
            cers[cer.parent.name] = value
    return cers


def _mean(values: list, fmt: str) -> str:
    have = [v for v in values if v is not None]
    return fmt.format(statistics.fmean(have)) if have else "-"


def table(runs: list[Path], test_set: str = "test") -> str:
    groups: dict[str, list[Path]] = {}
    for run in runs:
        groups.setdefault(group_name(run), []).append(run)
    data = {name: [(read_training(r), read_cers(r, test_set), read_rtf(r, test_set)) for r in members]
            for name, members in groups.items()}
    modes = sorted({m for rows in data.values() for _, cers, _ in rows for m in cers}, key=mode_key)
    if not modes:
        return ""
    lines = ["| encoder | parameters | training s/epoch | training min (all) | "
             + " | ".join(f"{m} CER %" for m in modes) + " | decode RTF | seeds |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in modes) + " | ---: | ---: |"]
    for name, rows in data.items():
        trains = [t for t, _, _ in rows]
        kind = next((t["encoder"] for t in trains if t["encoder"]), None)
        label = name if kind in (None, name) else f"{name} ({kind})"
        cells = []
        for mode in modes:
            values = [cers[mode] for _, cers, _ in rows if mode in cers]
            if not values:
                cells.append("-")
                continue
            cells.append("{:.2f} ± {:.2f}".format(*mean_sd(values)))
        seeds = max(sum(mode in cers for _, cers, _ in rows) for mode in modes)
        lines.append(f"| {label} | {_mean([t['params_m'] for t in trains], '{:.2f} M')} | "
                     f"{_mean([t['epoch_s'] for t in trains], '{:.0f}')} | "
                     f"{_mean([t['total_min'] for t in trains], '{:.0f}')} | " + " | ".join(cells)
                     + f" | {_mean([rtf for _, _, rtf in rows], '{:.4f}')} | {seeds} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories (<name>_seed<N>)")
    p.add_argument("--test_set", default="test", help="the decode_<test_set> folders scored (default: test)")
    p.add_argument("--out", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)
    text = table(args.runs, args.test_set)
    if not text:
        print(f"error: no decode_{args.test_set}/<mode>/cer under {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 1
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
