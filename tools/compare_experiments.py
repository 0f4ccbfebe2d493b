#!/usr/bin/env python3
"""Whether two runs of a recipe gave the same models and the same results, file by file.

    python tools/compare_experiments.py A_EXP_DIR B_EXP_DIR

What a change that must not change behaviour (a refactoring) is checked with: the same
recipe run on a fresh checkout before and after it, then its ``exp/`` folders compared.
Every checkpoint (``*.pt``, in every subfolder) of ``A`` must exist in ``B`` with
``torch.equal`` model tensors (the same names, dtypes, shapes and values; the optimizer's and
scheduler's states too, where a checkpoint holds them), and every decoding result
(``text``, ``cer``, ``wer`` and ``results.md`` files under ``decode_*``, which hold no timings)
must be the same bytes.  The checkpoints' ``config`` (paths of the checkout) and ``format``
entries are left out.  One line per difference; exit status 0 when there is none, 1 when there is, 2 on bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asrkit.checkpoint.load import CheckpointError, load_checkpoint  # noqa: E402

RESULT_FILES = ("text", "cer", "wer", "results.md")


def differences(a, b, where: str) -> list[str]:
    """The differences between two checkpoint entries (nested dicts, lists, tensors, plain values)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{where}: a tensor in one run only"]
        if a.dtype != b.dtype or a.shape != b.shape:
            return [f"{where}: {a.dtype} {tuple(a.shape)} against {b.dtype} {tuple(b.shape)}"]
        return [] if torch.equal(a, b) else [f"{where}: values differ (max |diff| "
                                             f"{(a.double() - b.double()).abs().max().item():.3g})"]
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: in one run only" for k in sorted(set(a) ^ set(b), key=str)]
        for k in sorted(set(a) & set(b), key=str):
            out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {str(a)[:60]!r} against {str(b)[:60]!r}"]


# entries of a training checkpoint that describe the run rather than what it computed
RUN_ENTRIES = ("config", "format")


def compare_checkpoint(a: Path, b: Path, name: str) -> list[str]:
    sa, sb = load_checkpoint(a), load_checkpoint(b)
    return differences({k: v for k, v in sa.items() if k not in RUN_ENTRIES},
                         {k: v for k, v in sb.items() if k not in RUN_ENTRIES}, name)


def compare(a: Path, b: Path) -> tuple[list[str], int, int]:
    """``(differences, checkpoints compared, result files compared)``."""
    diffs, checkpoints, results = [], 0, 0
    for pa in sorted(a.rglob("*.pt")):
        name = str(pa.relative_to(a))
        pb = b / name
        if not pb.is_file():
            diffs.append(f"{name}: missing in {b}")
            continue
        diffs += compare_checkpoint(pa, pb, name)
        checkpoints += 1
    for pa in sorted(p for p in a.rglob("*") if p.name in RESULT_FILES and "decode_" in str(p.relative_to(a))):
        name = str(pa.relative_to(a))
        pb = b / name
        if not pb.is_file():
            diffs.append(f"{name}: missing in {b}")
        elif pa.read_bytes() != pb.read_bytes():
            diffs.append(f"{name}: differs")
        results += 1
    return diffs, checkpoints, results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = p.parse_args(argv)
    for d in (args.a, args.b):
        if not d.is_dir():
            print(f"error: {d} is not a directory", file=sys.stderr)
            return 2
    try:
        diffs, checkpoints, results = compare(args.a, args.b)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in diffs:
        print(line)
    print(f"{checkpoints} checkpoints and {results} result files compared: "
          f"{'identical' if not diffs else f'{len(diffs)} difference(s)'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
