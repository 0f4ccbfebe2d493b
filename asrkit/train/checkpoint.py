"""Checkpoints: atomic full-state saves, safe loading, resume lookup, pruning, averaging.

A checkpoint is one file ``<model_dir>/<name>.pt`` (``step_<N>.pt`` every
``save_interval`` optimizer steps, ``epoch_<E>.pt`` at the end of epoch E) holding a dict
of tensors and plain Python types only -- model, optimizer, scheduler and grad-scaler
states, epoch, step, RNG states, sampler position and the resolved config -- so
``torch.load(weights_only=True)`` loads it and a file carrying any other pickled object
is refused.  Beside it, ``<name>.yaml`` records epoch, step and CV loss (what
``average_model --mode best`` ranks by).  The naming rule, and the order "newest" refers
to, are :mod:`asrkit.io.checkpoint_names`'s.

Writes are atomic: the file is written to a temporary name in the same directory,
flushed and fsync'ed, then renamed over the target; a crash or a full disk mid-write
leaves every earlier checkpoint intact (the partial temporary file is removed, or
ignored and cleaned up on the next start).  A failed write -- a full disk (``ENOSPC``),
a file-size limit (``EFBIG``), an I/O error -- raises :class:`CheckpointError` naming the
file and the operating system's reason.

Integrity: the SHA-256 of the ``.pt`` bytes, computed while they are written, is stored
in the ``.yaml`` record (``sha256``, ``bytes``).  :func:`load_checkpoint` checks it when
the record has one, so a checkpoint whose bytes changed after the write (a flipped
block, a partial copy) is refused as corrupted; ``torch.load`` alone notices a truncated
file but not changed tensor bytes.  A ``.pt`` without a record (``average_model``'s
output) is checked structurally only.
"""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import yaml

# (loading lives in asrkit.io.checkpoint, shared with inference; re-exported here for the trainer)
from asrkit.io.checkpoint import CheckpointError, load_checkpoint, read_info
from asrkit.io.checkpoint_names import step_checkpoints_beyond, training_checkpoints
from asrkit.models.state import model_state, resolved_state
from asrkit.io.files import WriteError, atomic_write, atomic_write_text, remove_temporaries

log = logging.getLogger("asrkit.train")

FORMAT_VERSION = 1


# ----------------------------------------------------------------------------- writing


def save_checkpoint(path: str | Path, state: dict, info: Optional[dict] = None) -> Path:
    """Atomically write ``state`` (with ``format`` added) to ``path`` and ``info`` to ``path.yaml``.

    ``info`` should hold plain values (epoch, step, cv_loss, ...); the file's ``sha256`` and
    ``bytes`` are added to it.  The ``.pt`` file is renamed into place before the ``.yaml``,
    so a checkpoint listed by its yaml is complete.  Raises :class:`CheckpointError` when
    the write fails (earlier checkpoints are then untouched).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = dict(state, format=FORMAT_VERSION)
    try:
        digest = atomic_write(path, lambda f: torch.save(state, f))
        if info is not None:
            atomic_write_text(path.with_suffix(".yaml"), yaml.safe_dump({**info, **digest}, sort_keys=False))
    except WriteError as e:
        raise CheckpointError(f"{e}; resume with --checkpoint auto once that is fixed -- the previous "
                              f"checkpoints are intact") from e
    return path


def find_resume_checkpoint(model_dir: str | Path) -> Optional[Path]:
    """The newest checkpoint in ``model_dir`` that loads (structure, weights-only content
    and recorded SHA-256 all checked); a broken newer one -- truncated, corrupted, carrying
    pickled objects -- is reported with a warning and skipped, falling back to the previous
    valid one.  None if none.  Newest means last in the training order of
    :func:`asrkit.io.checkpoint_names.training_checkpoints` (by recorded step)."""
    for path in reversed(training_checkpoints(model_dir)):
        try:
            load_checkpoint(path)
        except CheckpointError as e:
            log.warning("skipping unusable checkpoint: %s", e)
            continue
        return path
    return None


def remove_stale_temporaries(model_dir: str | Path) -> int:
    """Delete temp files left by a writer that died mid-save; returns how many.  Call it on
    the one process that writes into ``model_dir`` (rank 0), before that process writes:
    called anywhere else it could delete a temporary another process is writing."""
    return remove_temporaries(model_dir)


def prune_step_checkpoints(model_dir: str | Path, keep: int) -> list[Path]:
    """Keep the newest ``keep`` ``step_*.pt`` files (training order; epoch checkpoints are
    never pruned), deleting the others with their ``.yaml`` records; returns the deleted."""
    removed = step_checkpoints_beyond(model_dir, keep)
    for p in removed:
        p.unlink(missing_ok=True)
        p.with_suffix(".yaml").unlink(missing_ok=True)
    return removed


# ----------------------------------------------------------------------------- RNG state


def capture_rng_state() -> dict:
    """Python, numpy and torch (CPU and CUDA) RNG states as tensors and plain types."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Set the RNG states :func:`capture_rng_state` took.  The torch states are byte tensors
    that torch accepts only on the CPU; a checkpoint loaded with ``map_location`` on a GPU
    brings them there, so they are moved back first."""
    random.setstate(_as_tuple(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _as_tuple(x):
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


# ----------------------------------------------------------------------------- averaging


def average_state_dicts(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the models in ``paths`` (floating tensors averaged in float64;
    integer buffers such as BatchNorm's ``num_batches_tracked`` taken from the last).  Each
    checkpoint is resolved first (``asrkit.models.state.resolved_state``): a fine-tuning
    run's base tensors put back and its LoRA adapters merged, so the mean is that of the
    plain models (the mean of merged weights, not a merge of mean adapters)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    states = (resolved_state(load_checkpoint(p), str(p)) for p in paths)
    dtypes: dict[str, torch.dtype] = {}
    for p, sd in zip(paths, states):
        if total and sd.keys() != total.keys():
            raise CheckpointError(f"{p} holds a different model than {paths[0]}")
        for k, v in sd.items():
            dtypes[k] = v.dtype
            if v.is_floating_point():
                total[k] = total[k] + v.double() if k in total else v.double().clone()
            else:
                total[k] = v.clone()
    return {k: (v / len(paths)).to(dtypes[k]) if dtypes[k].is_floating_point else v
            for k, v in total.items()}


# ----------------------------------------------------------------------------- initialising from another run


def init_modules(model: torch.nn.Module, path: str | Path, prefixes: list[str], *,
                 source: Optional[dict] = None, skip: tuple[str, ...] = ()) -> list[str]:
    """Copy the parameters and buffers whose names start with one of ``prefixes`` (e.g.
    ``["encoder."]``) from the model in checkpoint ``path`` (a training checkpoint or an
    averaged model) into ``model``; everything else keeps its fresh initialisation.
    WeNet's ``--enc_init`` / ``--enc_init_mods``: a BPE model can start from the encoder of
    a char model (or any pretrained encoder of the same architecture).

    Strict about what it does copy: every prefix must match at least one entry of ``model``
    and every such entry must be in the checkpoint with the same shape, else
    :class:`CheckpointError` names the first offending key (a different ``output_size`` or
    ``num_blocks`` is refused, not silently skipped).  A WeNet checkpoint is read with
    WeNet's names mapped (:func:`asrkit.models.state.model_state`).  ``source``: that state,
    when the caller has it already; ``skip``: prefixes within ``prefixes`` left at their
    fresh initialisation (re-initialised output layers).  Returns the copied names.
    """
    prefixes = [p for p in prefixes if p]
    if not prefixes:
        raise CheckpointError("init_modules: no module prefix given (e.g. 'encoder.')")
    if source is None:
        source = model_state(load_checkpoint(path), model, f"init from {path}")
    target = model.state_dict()
    copied: list[str] = []
    for prefix in prefixes:
        names = [k for k in target if k.startswith(prefix)]
        if not names:
            raise CheckpointError(f"init from {path}: the model has no parameter whose name starts with '{prefix}' "
                                  f"(its top-level modules: {sorted({k.split('.')[0] + '.' for k in target})})")
        for name in names:
            if name.startswith(skip):
                continue
            if name not in source:
                raise CheckpointError(f"init from {path}: the checkpoint has no '{name}' (a different "
                                      f"architecture?)")
            if source[name].shape != target[name].shape:
                raise CheckpointError(f"init from {path}: '{name}' is {tuple(source[name].shape)} in the "
                                      f"checkpoint, {tuple(target[name].shape)} in this model")
            target[name] = source[name]  # (load_state_dict copies into the model's dtype)
            copied.append(name)
    model.load_state_dict(target)
    return copied
