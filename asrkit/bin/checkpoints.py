"""The checkpoint-naming rule (:mod:`asrkit.checkpoint.names`) for shell scripts: one
path per line on stdout, nothing else.

    python -m asrkit.bin.checkpoints kind PATH           step | epoch | average | other
    python -m asrkit.bin.checkpoints list DIR [--kind step|epoch]
                                                          training checkpoints, oldest first
                                                          (training order: by recorded step)
    python -m asrkit.bin.checkpoints averaged DIR         averaged models (avg_*.pt)
    python -m asrkit.bin.checkpoints decode DIR           the checkpoint decoding picks
    python -m asrkit.bin.checkpoints average DIR --num N [--mode best|last]
                     [--min_epoch E] [--max_epoch E]      what average_model would average

A missing directory, a directory with no checkpoint to decode or to average: one
``error:`` line on stderr, status 2.  Needs no torch (starts in a fraction of a second).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asrkit.checkpoint import names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m asrkit.bin.checkpoints", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    kind = sub.add_parser("kind", help="the kind of checkpoint a file name is")
    kind.add_argument("path", type=Path)
    listing = sub.add_parser("list", help="training checkpoints, oldest first")
    listing.add_argument("model_dir", type=Path)
    listing.add_argument("--kind", choices=[names.STEP, names.EPOCH], default=None)
    averaged = sub.add_parser("averaged", help="averaged models")
    averaged.add_argument("model_dir", type=Path)
    decode = sub.add_parser("decode", help="the checkpoint to decode")
    decode.add_argument("model_dir", type=Path)
    average = sub.add_parser("average", help="the epoch checkpoints average_model would average")
    average.add_argument("model_dir", type=Path)
    average.add_argument("--num", type=int, required=True)
    average.add_argument("--mode", choices=["last", "best"], default="best")
    average.add_argument("--min_epoch", type=int, default=0)
    average.add_argument("--max_epoch", type=int, default=10**9)
    return p


def answer(args: argparse.Namespace) -> list[str]:
    """The lines to print for ``args``; raises CheckpointSelectionError for bad input."""
    if args.command == "kind":
        name = names.parse_name(args.path)
        return [name.kind if name else "other"]
    if not args.model_dir.is_dir():
        raise names.CheckpointSelectionError(f"{args.model_dir}: no such directory")
    if args.command == "list":
        paths = names.training_checkpoints(args.model_dir, args.kind)
    elif args.command == "averaged":
        paths = names.averaged_models(args.model_dir)
    elif args.command == "decode":
        chosen = names.checkpoint_to_decode(args.model_dir)
        if chosen is None:
            raise names.CheckpointSelectionError(f"{args.model_dir}: no checkpoint to decode (avg_<N>.pt, "
                                                 f"{names.FINAL}, epoch_*.pt or step_*.pt)")
        paths = [chosen]
    else:
        paths = names.checkpoints_to_average(args.model_dir, args.num, args.mode, args.min_epoch, args.max_epoch)
    return [str(p) for p in paths]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        lines = answer(args)
    except names.CheckpointSelectionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
