"""Average the weights of several epoch checkpoints (what decoding usually uses).

    python -m asrkit.bin.average_model --model_dir exp/conformer --num 5 --mode best \\
        --dst exp/conformer/avg_5.pt

``--mode last``: the ``num`` most recent ``epoch_*.pt``; ``--mode best``: the ``num``
with the lowest CV loss recorded in their ``epoch_*.yaml``.  The result holds the model
weights only (``{"model": state_dict}``), written atomically; ``recognize`` and
``export`` load it like any checkpoint.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from asrkit.train import checkpoint as ckpt

log = logging.getLogger("asrkit.train")


def select_checkpoints(model_dir: Path, num: int, mode: str, min_epoch: int = 0,
                       max_epoch: int = 10**9) -> list[Path]:
    """The epoch checkpoints to average, oldest first."""
    candidates = []
    for path in model_dir.glob("epoch_*.pt"):
        m = re.fullmatch(r"epoch_(\d+)\.pt", path.name)
        if not m or not min_epoch <= int(m.group(1)) <= max_epoch:
            continue
        info = ckpt.read_info(path) or {}
        candidates.append((int(m.group(1)), info.get("cv_loss"), path))
    if not candidates:
        raise ckpt.CheckpointError(f"no epoch_*.pt checkpoints in {model_dir}")
    if mode == "best":
        missing = [p.name for _, loss, p in candidates if loss is None]
        if missing:
            raise ckpt.CheckpointError(f"--mode best needs a cv_loss for every epoch; missing for {missing}")
        chosen = sorted(candidates, key=lambda c: (c[1], -c[0]))[:num]
    else:
        chosen = sorted(candidates)[-num:]
    return [p for _, _, p in sorted(chosen)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True, type=Path)
    p.add_argument("--dst", required=True, type=Path, help="output checkpoint")
    p.add_argument("--num", type=int, default=5, help="how many checkpoints to average")
    p.add_argument("--mode", choices=["last", "best"], default="best")
    p.add_argument("--min_epoch", type=int, default=0)
    p.add_argument("--max_epoch", type=int, default=10**9)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        paths = select_checkpoints(args.model_dir, args.num, args.mode, args.min_epoch, args.max_epoch)
        averaged = ckpt.average_state_dicts(paths)
        out = {"model": averaged, "averaged_from": [p.name for p in paths]}
        config = ckpt.load_checkpoint(paths[-1]).get("config")
        if config is not None:  # what the weights mean (config_version) travels with them
            out["config"] = config
        ckpt.save_checkpoint(args.dst, out)
    except ckpt.CheckpointError as e:  # a checkpoint to average does not load: status 2
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
