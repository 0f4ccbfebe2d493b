"""Reading asrkit checkpoints (training and inference alike): the integrity check against
the ``.yaml`` record beside a ``.pt`` (read by :mod:`asrkit.checkpoint.record`) and a
weights-only load; the resume lookup (the newest checkpoint that loads).  Which file of a
model directory is which checkpoint, and in which order they come, is the rule of
:mod:`asrkit.checkpoint.names`; putting the loaded weights into a model,
:mod:`asrkit.checkpoint.weights`.

A checkpoint ``<name>.pt`` holds tensors and plain Python types only, so
``torch.load(weights_only=True)`` loads it and a file carrying any other pickled object
is refused (never executed).  Its ``<name>.yaml`` record holds epoch, step, CV loss and
the SHA-256 and size of the ``.pt`` bytes, computed while they were written
(:func:`asrkit.checkpoint.save.save_checkpoint`); :func:`load_checkpoint` checks them when the
record has them, so a checkpoint whose bytes changed after the write is refused as
corrupted.  A ``.pt`` without a record (``average_model``'s output) is checked
structurally only.  A sharded checkpoint's folder of shards (``asrkit.checkpoint.sharded``)
is checked file by file against the digests its ``.pt`` records (:func:`verify_sharded`).
"""
from __future__ import annotations

import logging
import re
import zipfile
from pathlib import Path
from typing import Any, Optional

import torch

from asrkit.checkpoint.names import training_checkpoints
from asrkit.checkpoint.record import read_record
from asrkit.files import file_digest

log = logging.getLogger("asrkit.checkpoint")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or is not a valid asrkit checkpoint."""


# the entry of a checkpoint whose sharded state is in a folder beside it (asrkit.checkpoint.sharded):
# {"folder": its name, "files": {file name: {"sha256", "bytes"}}}
SHARDS = "shards"


def verify_digest(path: str | Path) -> None:
    """Raise :class:`CheckpointError` when ``path``'s ``.yaml`` record holds a ``sha256``
    (and ``bytes``) that the file does not match; nothing to check without one."""
    path = Path(path)
    info = read_record(path) or {}
    want = info.get("sha256")
    if not want:
        return
    size = path.stat().st_size
    if info.get("bytes") is not None and size != info["bytes"]:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted: {size} bytes, its record "
                              f"{path.with_suffix('.yaml').name} says {info['bytes']}")
    got = file_digest(path)
    if got != want:
        raise CheckpointError(f"checkpoint {path} is corrupted: its SHA-256 {got[:12]}... differs from "
                              f"the {want[:12]}... recorded in {path.with_suffix('.yaml').name} when it was written")


def verify_sharded(path: str | Path, record: dict) -> Path:
    """The shard folder of checkpoint ``path`` after checking every file against ``record``
    (``asrkit.checkpoint.sharded.write_sharded``'s): :class:`CheckpointError` for a missing folder, a missing,
    added, resized or changed file."""
    folder = Path(path).with_name(record["folder"])
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint {path} keeps its sharded state in {folder}, which is missing "
                              f"(copy the folder along with the .pt)")
    present = {p.name for p in folder.iterdir()}
    expected = record["files"]
    if present != set(expected):
        missing, added = sorted(set(expected) - present), sorted(present - set(expected))
        raise CheckpointError(f"checkpoint {path}: its shard folder {folder.name} "
                              + ("lacks " + ", ".join(missing) if missing else "")
                              + ("; " if missing and added else "") + ("has files it was not written with: "
                                                                       + ", ".join(added) if added else ""))
    for name, want in expected.items():
        file = folder / name
        size = file.stat().st_size
        if size != want["bytes"] or file_digest(file) != want["sha256"]:
            raise CheckpointError(f"checkpoint {path}: shard file {folder.name}/{name} is corrupted ("
                                  f"{'its size differs from' if size != want['bytes'] else 'its SHA-256 differs from'}"
                                  f" the one recorded when it was written); not loaded")
    return folder


def read_weights_only(path: str | Path, map_location: Any = "cpu") -> Any:
    """What ``torch.load(path, weights_only=True)`` reads, whatever its layout (an asrkit
    checkpoint, OpenAI's Whisper file, ...).  Raises :class:`CheckpointError` for a missing,
    truncated or corrupted file (including one whose bytes do not match the SHA-256 of its
    ``.yaml`` record) and for a file carrying pickled objects other than tensors and plain
    types (never executed)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    verify_digest(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        raise CheckpointError(f"checkpoint {path} {_load_failure(path, e)}") from e


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict:
    """Load an asrkit checkpoint (:func:`read_weights_only`, whose refusals it raises) and
    check that it is a dict with a ``"model"`` entry (:class:`CheckpointError` if not).
    A bare ``state_dict`` (e.g. an averaged model) is returned as ``{"model": sd}``.
    """
    path = Path(path)
    obj = read_weights_only(path, map_location)
    if not isinstance(obj, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(obj).__name__}, not a dict")
    if "model" not in obj:
        if all(isinstance(v, torch.Tensor) for v in obj.values()):
            return {"model": obj}
        raise CheckpointError(f"checkpoint {path} has no 'model' entry")
    return obj


def _load_failure(path: Path, e: Exception) -> str:
    """Why ``torch.load(path, weights_only=True)`` failed, in a few words and one line."""
    text = str(e)
    if not zipfile.is_zipfile(path):
        return "is truncated or corrupted, or not a PyTorch checkpoint (torch.save writes a zip archive)"
    # (torch words it "Unsupported global: GLOBAL x.Y ..." for a class it does not allow and
    # "unsupported GLOBAL posix.system whose module posix is blocked" for a blocked module)
    refused = re.search(r"unsupported (?:global|operand)[^\n]*", text, re.IGNORECASE)
    if refused:
        return ("refused: it carries pickled objects that are not tensors or plain types (never executed: "
                f"{refused.group(0)[:160]})")
    return f"is truncated or corrupted ({type(e).__name__}: {text.splitlines()[0][:160] if text else ''})"


def strip_module_prefix(state_dict: dict) -> dict:
    """Drop a ``module.`` prefix that every key carries (a DDP-wrapped save)."""
    if state_dict and all(k.startswith("module.") for k in state_dict):
        return {k[len("module."):]: v for k, v in state_dict.items()}
    return state_dict


def _names(keys) -> str:
    keys = sorted(keys)
    return ", ".join(f"'{k}'" for k in keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def check_keys(state: dict, model: torch.nn.Module, source: str) -> None:
    """:class:`CheckpointError` naming the first missing or extra keys, or a key whose
    shape differs, between ``state`` and ``model.state_dict()``; or two keys that are one
    tensor of the model (tied: ``tie_word_embedding``) with different values in ``state``
    (e.g. WeNet trained with ``--jit``, which clones the embedding into the output layer
    instead of tying them: asrkit's tied model cannot hold both)."""
    target = model.state_dict()
    missing = target.keys() - state.keys()
    extra = state.keys() - target.keys()
    if missing or extra:
        parts = ([f"missing {_names(missing)}"] if missing else []) + ([f"extra {_names(extra)}"] if extra else [])
        raise CheckpointError(f"{source} does not match the config's model: {'; '.join(parts)}")
    for name, tensor in target.items():
        if state[name].shape != tensor.shape:
            raise CheckpointError(f"{source} does not match the config's model: '{name}' is "
                                  f"{tuple(state[name].shape)} in the checkpoint, {tuple(tensor.shape)} "
                                  f"in the model")
    first_of: dict[int, str] = {}
    for name, tensor in target.items():
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # (a sharded model: this rank's shard)
        first = first_of.setdefault(local.data_ptr(), name) if local.numel() else name
        if first != name and not torch.equal(state[first], state[name]):
            raise CheckpointError(f"{source} does not match the config's model: '{first}' and '{name}' are one "
                                  f"tensor of the model (tied) but differ in the checkpoint")


def find_resume_checkpoint(model_dir: str | Path) -> Optional[Path]:
    """The newest checkpoint in ``model_dir`` that loads (structure, weights-only content
    and recorded SHA-256 all checked, and those of its shard files: :func:`verify_sharded`);
    a broken newer one -- truncated, corrupted, carrying
    pickled objects -- is reported with a warning and skipped, falling back to the previous
    valid one.  None if none.  Newest means last in the training order of
    :func:`asrkit.checkpoint.names.training_checkpoints` (by recorded step)."""
    for path in reversed(training_checkpoints(model_dir)):
        try:
            state = load_checkpoint(path)
            if state.get(SHARDS):
                verify_sharded(path, state[SHARDS])
        except CheckpointError as e:
            log.warning("skipping unusable checkpoint: %s", e)
            continue
        return path
    return None
