"""Average the weights of several epoch checkpoints (what decoding usually uses).

    python -m asrkit.bin.average_model --model_dir exp/conformer --num 5 --mode best \\
        --dst exp/conformer/avg_5.pt

``--mode last``: the ``num`` ``epoch_*.pt`` with the largest epoch numbers; ``--mode
best``: the ``num`` with the lowest CV loss recorded in their ``epoch_*.yaml``
(:func:`asrkit.io.checkpoint_names.checkpoints_to_average` chooses).  The result holds the
model weights (``{"model": state_dict}``) with the config and the units digests
(``asrkit.inputs.INPUT_DIGESTS``) of the last checkpoint averaged, written atomically;
``recognize`` and ``export`` load it like any checkpoint.  Fewer than ``--num``
checkpoints to average: a warning with the requested and found counts, and the found ones
are averaged; with ``--strict`` an error, exit status 2, nothing written.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from asrkit.inputs import INPUT_DIGESTS
from asrkit.io.checkpoint_names import CheckpointSelectionError, checkpoints_to_average
from asrkit.train import checkpoint as ckpt

log = logging.getLogger("asrkit.train")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True, type=Path)
    p.add_argument("--dst", required=True, type=Path, help="output checkpoint")
    p.add_argument("--num", type=int, default=5, help="how many checkpoints to average")
    p.add_argument("--mode", choices=["last", "best"], default="best")
    p.add_argument("--min_epoch", type=int, default=0)
    p.add_argument("--max_epoch", type=int, default=10**9)
    p.add_argument("--strict", action="store_true",
                   help="refuse (exit 2) when fewer than --num checkpoints are found, instead of warning")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        paths = checkpoints_to_average(args.model_dir, args.num, args.mode, args.min_epoch, args.max_epoch)
        if len(paths) < args.num:
            found = (f"--num {args.num} asked for {args.num} checkpoints, {args.model_dir} has {len(paths)} to "
                     f"average ({', '.join(p.name for p in paths)})")
            if args.strict:
                print(f"error: {found}; pass --num {len(paths)} or train more epochs", file=sys.stderr)
                return 2
            print(f"warning: {found}: averaging those {len(paths)}", file=sys.stderr)
        averaged = ckpt.average_state_dicts(paths)
        out = {"model": averaged, "averaged_from": [p.name for p in paths]}
        last = ckpt.load_checkpoint(paths[-1])
        for key in ("config", INPUT_DIGESTS):  # what the weights mean (config_version, units) travels with them
            if last.get(key) is not None:
                out[key] = last[key]
        ckpt.save_checkpoint(args.dst, out)
    except (CheckpointSelectionError, ckpt.CheckpointError) as e:  # nothing to average, or one does not load: status 2
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the average could not be written
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {args.dst}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
