"""Which file in a model directory is which checkpoint, in which order: the one naming rule
that training (resume, pruning), averaging, transcription and the recipes' shell stages
(through ``python -m asrkit.bin.checkpoints``) share.

Names (``<model_dir>/<name>``):

* ``step_<N>.pt`` -- a training checkpoint written after optimizer step N (mid-epoch);
* ``epoch_<E>.pt`` -- a training checkpoint written at the end of epoch E;
* ``avg_<N>.pt`` -- an averaged model (``asrkit.bin.average_model``), N the number of
  checkpoints averaged; any other ``avg_<label>.pt`` (e.g. ``avg_best.pt``) is an averaged
  model too, with no number.

A sharded run's training checkpoint also has a folder of shards beside it,
``<name>.dcp`` (:func:`sharded_folder`), which belongs to the ``.pt`` of the same name.

Anything else (``final.pt``, ``init.pt``, ...) is not named by this rule.  A training
checkpoint may have a ``.yaml`` record beside it (:mod:`asrkit.checkpoint.record`)
holding the optimizer step it was saved at.

**Training order** (:func:`training_checkpoints`), oldest first: by the recorded step; a
checkpoint without one takes N from ``step_<N>.pt`` and -1 for ``epoch_<E>.pt`` (so an
epoch checkpoint whose record is missing -- its writer died between the ``.pt`` and the
``.yaml`` -- is never taken for the newest); at the same step an epoch checkpoint comes
after a step checkpoint, then the smaller number first, then the name.  Modification times
play no part, so a copied or touched older file does not become the newest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from asrkit.checkpoint.record import read_info

STEP, EPOCH, AVERAGE = "step", "epoch", "average"
FINAL = "final.pt"  # WeNet's name for the model its training ends with

_TRAINING = re.compile(r"(step|epoch)_(\d+)\.pt")
_AVERAGE = re.compile(r"avg_([^/]*)\.pt")
_NUMBER = re.compile(r"\d+")


class CheckpointSelectionError(ValueError):
    """No checkpoint fits what was asked (one line naming the directory or the files)."""


@dataclass(frozen=True)
class CheckpointName:
    """A parsed checkpoint file name: ``kind`` :data:`STEP`, :data:`EPOCH` or
    :data:`AVERAGE`, and ``number`` (the N of ``step_<N>``/``epoch_<E>``/``avg_<N>``;
    None for an averaged model whose label is not a number)."""
    kind: str
    number: Optional[int]


def parse_name(name: str | Path) -> Optional[CheckpointName]:
    """The kind and number of checkpoint file ``name`` (a file name or a path: only its
    last component counts); None when the name follows none of the module's patterns."""
    base = Path(name).name
    m = _TRAINING.fullmatch(base)
    if m:
        return CheckpointName(m.group(1), int(m.group(2)))
    m = _AVERAGE.fullmatch(base)
    if m:
        label = m.group(1)
        return CheckpointName(AVERAGE, int(label) if _NUMBER.fullmatch(label) else None)
    return None


def sharded_folder(path: str | Path) -> Path:
    """The folder beside training checkpoint ``path`` holding its shards, when it has them
    (a sharded run's: ``asrkit.checkpoint.sharded``): ``step_4.pt`` -> ``step_4.dcp``."""
    return Path(path).with_suffix(".dcp")


def checkpoint_filename(kind: str, number: int) -> str:
    """The file name of a checkpoint: ``step_<N>.pt``, ``epoch_<E>.pt`` or ``avg_<N>.pt``."""
    prefix = {STEP: "step", EPOCH: "epoch", AVERAGE: "avg"}[kind]
    return f"{prefix}_{number}.pt"


def _named_files(model_dir: Path, kinds: tuple[str, ...]) -> list[tuple[CheckpointName, Path]]:
    found = []
    for path in Path(model_dir).glob("*.pt"):
        name = parse_name(path.name)
        if name is not None and name.kind in kinds and path.is_file():
            found.append((name, path))
    return found


def training_step(path: str | Path) -> int:
    """The step training checkpoint ``path`` orders by: the one its ``.yaml`` record holds,
    else N of ``step_<N>.pt``, else -1 (an ``epoch_<E>.pt`` without a record)."""
    path = Path(path)
    name = parse_name(path.name)
    if name is None or name.kind == AVERAGE:
        raise ValueError(f"{path.name} is not a training checkpoint name (step_<N>.pt or epoch_<E>.pt)")
    recorded = (read_info(path) or {}).get("step")
    if recorded is not None:
        try:
            return int(recorded)
        except (TypeError, ValueError):
            pass  # a record with no usable step: ordered as without one
    return name.number if name.kind == STEP else -1


def training_checkpoints(model_dir: str | Path, kind: Optional[str] = None) -> list[Path]:
    """The training checkpoints (``step_*.pt`` and ``epoch_*.pt``; with ``kind`` only those
    of that kind) in ``model_dir``, oldest first in the training order (module docstring).
    The last one is what ``--checkpoint auto`` tries first."""
    kinds = (STEP, EPOCH) if kind is None else (kind,)
    if not set(kinds) <= {STEP, EPOCH}:
        raise ValueError(f"kind {kind!r}: training checkpoints are {STEP!r} or {EPOCH!r}")
    found = [((training_step(path), 1 if name.kind == EPOCH else 0, name.number, path.name), path)
             for name, path in _named_files(model_dir, kinds)]
    return [path for _, path in sorted(found)]


def step_checkpoints_beyond(model_dir: str | Path, keep: int) -> list[Path]:
    """The ``step_*.pt`` files of ``model_dir`` older (training order) than its newest
    ``keep`` ones: what pruning removes.  Epoch checkpoints are never among them."""
    steps = training_checkpoints(model_dir, STEP)
    return steps[:-keep] if keep > 0 else steps


def averaged_models(model_dir: str | Path) -> list[Path]:
    """The averaged models (``avg_*.pt``) in ``model_dir``: those without a number first
    (by name), then ``avg_<N>.pt`` by N, smallest first."""
    found = [((name.number is not None, name.number or 0, path.name), path)
             for name, path in _named_files(model_dir, (AVERAGE,))]
    return [path for _, path in sorted(found)]


def checkpoint_to_decode(model_dir: str | Path) -> Optional[Path]:
    """The checkpoint an experiment decodes with when none is named, or None:

    1. the averaged model ``avg_<N>.pt`` with the largest N (an average is what a recipe
       decodes; several averages of one run differ in how many epochs they take, and the
       larger N is the recipes' choice for the final model); an ``avg_<label>.pt`` without a
       number is never guessed at -- name it;
    2. else ``final.pt``;
    3. else the newest training checkpoint in the training order (module docstring).

    Names and records decide, never modification times: copying a directory, or touching
    an older file, does not change the choice.
    """
    numbered = [p for p in averaged_models(model_dir) if parse_name(p).number is not None]
    if numbered:
        return numbered[-1]
    final = Path(model_dir) / FINAL
    if final.is_file():
        return final
    trained = training_checkpoints(model_dir)
    return trained[-1] if trained else None


def checkpoints_to_average(model_dir: str | Path, num: int, mode: str, min_epoch: int = 0,
                           max_epoch: int = 10**9) -> list[Path]:
    """The epoch checkpoints ``asrkit.bin.average_model`` averages, ordered by epoch number
    (the order they are summed in).  Candidates: every ``epoch_<E>.pt`` of ``model_dir``
    with ``min_epoch <= E <= max_epoch``.  ``mode`` ``"last"``: the ``num`` with the largest
    E; ``"best"``: the ``num`` with the lowest ``cv_loss`` in their ``.yaml`` record (equal
    losses: the later epoch).  The epoch number, not the recorded step, orders them here:
    within one run the two agree, and an epoch checkpoint whose record was lost keeps its
    place.  Raises :class:`CheckpointSelectionError` when there is no candidate, or, for
    ``"best"``, when a candidate has no ``cv_loss``."""
    if mode not in ("last", "best"):
        raise ValueError(f"mode {mode!r}: 'last' or 'best'")
    if num < 1:
        raise CheckpointSelectionError(f"cannot average {num} checkpoints: give a number >= 1")
    candidates = [(name.number, (read_info(path) or {}).get("cv_loss"), path)
                  for name, path in _named_files(model_dir, (EPOCH,)) if min_epoch <= name.number <= max_epoch]
    if not candidates:
        raise CheckpointSelectionError(f"no epoch_*.pt checkpoints in {model_dir}"
                                       + (f" with epoch {min_epoch}..{max_epoch}" if (min_epoch, max_epoch)
                                          != (0, 10**9) else ""))
    if mode == "best":
        missing = sorted(p.name for _, loss, p in candidates if loss is None)
        if missing:
            raise CheckpointSelectionError(f"--mode best needs a cv_loss for every epoch; missing for {missing}")
        chosen = sorted(candidates, key=lambda c: (c[1], -c[0]))[:num]
    else:
        chosen = sorted(candidates, key=lambda c: (c[0], c[2].name))[-num:]
    return [p for _, _, p in sorted(chosen, key=lambda c: (c[0], c[2].name))]
