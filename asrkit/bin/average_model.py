"""Average the weights of several epoch checkpoints (what decoding usually uses).

    python -m asrkit.bin.average_model --model_dir exp/conformer --num 5 --mode best \\
        --dst exp/conformer/avg_5.pt

``--mode last``: the ``num`` ``epoch_*.pt`` with the largest epoch numbers; ``--mode
best``: the ``num`` with the lowest CV loss recorded in their ``epoch_*.yaml``
(:func:`asrkit.checkpoint.names.checkpoints_to_average` chooses).  The result holds the
model weights (``{"model": state_dict}``) with the config and the units digests
(``asrkit.config_files.INPUT_DIGESTS``) of the last checkpoint averaged, written atomically;
``recognize`` and ``export`` load it like any checkpoint.  Fewer than ``--num``
checkpoints to average: a warning with the requested and found counts, and the found ones
are averaged; with ``--strict`` an error, exit status 2, nothing written.

``--mode ema``: no averaging -- the weight EMA (``asrkit.train.ema``) that the newest epoch
checkpoint (up to ``--max_epoch``) holds, written the same way (``--num`` is not used); a
run trained without ``ema_decay`` has none: exit status 2.

    python -m asrkit.bin.average_model --model_dir exp/conformer --mode ema --dst exp/conformer/avg_ema.pt
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from asrkit.checkpoint.average import average_state_dicts
from asrkit.checkpoint.load import CheckpointError, load_checkpoint
from asrkit.checkpoint.names import (EPOCH, CheckpointSelectionError, checkpoints_to_average, parse_name,
                                     training_checkpoints)
from asrkit.checkpoint.save import save_checkpoint
from asrkit.config_files import INPUT_DIGESTS
from asrkit.models.lora import LORA_RECORD, merge_lora_state
from asrkit.train.ema import ema_weights

log = logging.getLogger("asrkit.train")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True, type=Path)
    p.add_argument("--dst", required=True, type=Path, help="output checkpoint")
    p.add_argument("--num", type=int, default=5, help="how many checkpoints to average")
    p.add_argument("--mode", choices=["last", "best", "ema"], default="best",
                   help="ema: the weight EMA of the newest epoch checkpoint instead of an average")
    p.add_argument("--min_epoch", type=int, default=0)
    p.add_argument("--max_epoch", type=int, default=10**9)
    p.add_argument("--strict", action="store_true",
                   help="refuse (exit 2) when fewer than --num checkpoints are found, instead of warning")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        if args.mode == "ema":
            return _write_ema(args)
        paths = checkpoints_to_average(args.model_dir, args.num, args.mode, args.min_epoch, args.max_epoch)
        if len(paths) < args.num:
            found = (f"--num {args.num} asked for {args.num} checkpoints, {args.model_dir} has {len(paths)} to "
                     f"average ({', '.join(p.name for p in paths)})")
            if args.strict:
                print(f"error: {found}; pass --num {len(paths)} or train more epochs", file=sys.stderr)
                return 2
            print(f"warning: {found}: averaging those {len(paths)}", file=sys.stderr)
        averaged = average_state_dicts(paths)
        _save(args.dst, {"model": averaged, "averaged_from": [p.name for p in paths]}, load_checkpoint(paths[-1]))
    except (CheckpointSelectionError, CheckpointError) as e:  # nothing to average, or one does not load: status 2
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the average could not be written
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {args.dst}",
          file=sys.stderr)
    return 0


def _save(dst: Path, out: dict, source: dict) -> None:
    for key in ("config", INPUT_DIGESTS):  # what the weights mean (config_version, units) travels with them
        if source.get(key) is not None:
            out[key] = source[key]
    save_checkpoint(dst, out)


def _write_ema(args) -> int:
    """``--mode ema`` (module docstring)."""
    epochs = [p for p in training_checkpoints(args.model_dir, EPOCH)
              if args.min_epoch <= parse_name(p).number <= args.max_epoch]
    if not epochs:
        raise CheckpointSelectionError(f"{args.model_dir}: no epoch checkpoint (epoch_<E>.pt) in "
                                       f"[{args.min_epoch}, {args.max_epoch}] to take the EMA from")
    state = load_checkpoint(epochs[-1])
    if state.get("ema") is None:
        raise CheckpointSelectionError(f"{epochs[-1]} holds no weight EMA: train with ema_decay (e.g. "
                                       f"--override ema_decay=0.999) to decode one")
    weights = ema_weights(state["ema"], state["model"])
    if state.get(LORA_RECORD):  # (the shadow follows the model: adapters unmerged)
        weights = merge_lora_state(weights, state[LORA_RECORD])
    _save(args.dst, {"model": weights, "ema_of": epochs[-1].name}, state)
    print(f"wrote the weight EMA of {epochs[-1].name} ({state['ema']['updates']} updates, decay "
          f"{state['ema']['decay']:g}) into {args.dst}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
