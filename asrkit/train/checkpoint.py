"""Checkpoints: atomic full-state saves, safe loading, resume lookup, pruning, averaging.

A checkpoint is one file ``<model_dir>/<name>.pt`` (``step_<N>.pt`` every
``save_interval`` optimizer steps, ``epoch_<E>.pt`` at the end of epoch E) holding a dict
of tensors and plain Python types only -- model, optimizer, scheduler and grad-scaler
states, epoch, step, RNG states, sampler position and the resolved config -- so
``torch.load(weights_only=True)`` loads it and a file carrying any other pickled object
is refused.  Beside it, ``<name>.yaml`` records epoch, step and CV loss (what
``average_model --mode best`` ranks by).

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

import errno
import hashlib
import logging
import os
import random
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import yaml

log = logging.getLogger("asrkit.train")

FORMAT_VERSION = 1
_NAME = re.compile(r"^(step|epoch)_(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or is not a valid asrkit checkpoint."""


# ----------------------------------------------------------------------------- writing


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _HashingWriter:
    """File-object wrapper for ``torch.save``: hashes the bytes as they are written and
    keeps the ``OSError`` of a failed write (torch replaces it with an opaque
    ``RuntimeError`` such as "unexpected pos 832 vs 726")."""

    def __init__(self, f):
        self.f = f
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.error: Optional[OSError] = None

    def write(self, data) -> int:
        try:
            n = self.f.write(data)
        except OSError as e:
            self.error = e
            raise
        self.sha256.update(data)
        self.size += len(data)
        return n

    def flush(self) -> None:
        self.f.flush()


def _write_failure(path: Path, e: BaseException, os_error: Optional[OSError]) -> CheckpointError:
    cause = os_error if os_error is not None else e
    hint = ""
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        hint = " (free disk space or raise the quota/file-size limit, then resume with --checkpoint auto)"
    return CheckpointError(f"could not write {path}: {type(cause).__name__}: {cause}{hint} -- the previous "
                           f"checkpoints are intact")


def atomic_write(path: Path, write_fn) -> dict:
    """Call ``write_fn(file_object)`` on a temp file next to ``path``, fsync it, then rename
    it over ``path``.  Returns ``{"sha256", "bytes"}`` of what was written.

    Any failure (``OSError`` from the file system, or the error a serializer turns it into)
    removes the temp file, leaves ``path`` as it was and raises :class:`CheckpointError`
    with the operating system's reason (e.g. ``[Errno 28] No space left on device``)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    writer = None
    try:
        with open(tmp, "wb") as f:
            writer = _HashingWriter(f)
            write_fn(writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        os_error = writer.error if writer is not None else None
        if isinstance(e, OSError) or os_error is not None:
            raise _write_failure(path, e, os_error) from e
        raise
    _fsync_dir(path.parent)
    return {"sha256": writer.sha256.hexdigest(), "bytes": writer.size}


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
    digest = atomic_write(path, lambda f: torch.save(state, f))
    if info is not None:
        text = yaml.safe_dump({**info, **digest}, sort_keys=False).encode()
        atomic_write(path.with_suffix(".yaml"), lambda f: f.write(text))
    return path


_INTEGRITY_KEYS = ("sha256", "bytes")


def update_info(path: str | Path, **values) -> None:
    """Add values (e.g. ``cv_loss``) to a checkpoint's ``.yaml`` record (its integrity
    fields are kept)."""
    info_path = Path(path).with_suffix(".yaml")
    record = _read_record(path) or {}
    record.update(values)
    text = yaml.safe_dump(record, sort_keys=False).encode()
    atomic_write(info_path, lambda f: f.write(text))


def _read_record(path: str | Path) -> Optional[dict]:
    """The whole ``.yaml`` record of a checkpoint, integrity fields included."""
    info_path = Path(path).with_suffix(".yaml")
    if not info_path.is_file():
        return None
    try:
        record = yaml.safe_load(info_path.read_text()) or {}
    except yaml.YAMLError:
        return None
    return record if isinstance(record, dict) else None


def read_info(path: str | Path) -> Optional[dict]:
    """The ``info`` a checkpoint was saved with (epoch, step, cv_loss, ...; without the
    integrity fields), or None when it has no readable ``.yaml`` record."""
    record = _read_record(path)
    if record is None:
        return None
    return {k: v for k, v in record.items() if k not in _INTEGRITY_KEYS}


# ----------------------------------------------------------------------------- reading


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_digest(path: str | Path) -> None:
    """Raise :class:`CheckpointError` when ``path``'s ``.yaml`` record holds a ``sha256``
    (and ``bytes``) that the file does not match; nothing to check without one."""
    path = Path(path)
    info = _read_record(path) or {}
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


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict:
    """Load a checkpoint with ``weights_only=True``.

    Raises :class:`CheckpointError` for a missing, truncated or corrupted file (including
    one whose bytes do not match the SHA-256 of its ``.yaml`` record) and for a file
    carrying pickled objects other than tensors and plain types (never executed).
    A bare ``state_dict`` (e.g. an averaged model) is returned as ``{"model": sd}``.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    verify_digest(path)
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        kind = "refused: it carries pickled objects that are not tensors or plain types" \
            if "weights_only" in str(e) or "Unsupported global" in str(e) else "is truncated or corrupted"
        raise CheckpointError(f"checkpoint {path} {kind} ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(obj).__name__}, not a dict")
    if "model" not in obj:
        if all(isinstance(v, torch.Tensor) for v in obj.values()):
            return {"model": obj}
        raise CheckpointError(f"checkpoint {path} has no 'model' entry")
    return obj


def list_checkpoints(model_dir: str | Path) -> list[Path]:
    """``step_*.pt`` and ``epoch_*.pt`` in ``model_dir``, oldest first by training step
    (an epoch-end checkpoint sorts after a step checkpoint of the same step)."""
    model_dir = Path(model_dir)
    found = []
    for p in model_dir.glob("*.pt"):
        m = _NAME.match(p.name)
        if not m:
            continue
        info = read_info(p) or {}
        step = info.get("step")
        if step is None:
            step = int(m.group(2)) if m.group(1) == "step" else -1
        found.append((int(step), 1 if m.group(1) == "epoch" else 0, p.stat().st_mtime, p))
    return [p for *_, p in sorted(found)]


def find_resume_checkpoint(model_dir: str | Path) -> Optional[Path]:
    """The newest checkpoint in ``model_dir`` that loads (structure, weights-only content
    and recorded SHA-256 all checked); a broken newer one -- truncated, corrupted, carrying
    pickled objects -- is reported with a warning and skipped, falling back to the previous
    valid one.  None if none."""
    for path in reversed(list_checkpoints(model_dir)):
        try:
            load_checkpoint(path)
        except CheckpointError as e:
            log.warning("skipping unusable checkpoint: %s", e)
            continue
        return path
    return None


def remove_stale_temporaries(model_dir: str | Path) -> int:
    """Delete temp files left by a writer that died mid-save; returns how many."""
    n = 0
    for p in Path(model_dir).glob(".*.tmp-*"):
        p.unlink(missing_ok=True)
        n += 1
    return n


def prune_step_checkpoints(model_dir: str | Path, keep: int) -> list[Path]:
    """Keep the newest ``keep`` ``step_*.pt`` files (epoch checkpoints are never pruned)."""
    steps = [p for p in list_checkpoints(model_dir) if p.name.startswith("step_")]
    removed = steps[:-keep] if keep > 0 else steps
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
    random.setstate(_as_tuple(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(x):
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


# ----------------------------------------------------------------------------- averaging


def average_state_dicts(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the models in ``paths`` (floating tensors averaged in float64;
    integer buffers such as BatchNorm's ``num_batches_tracked`` taken from the last)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        sd = load_checkpoint(p)["model"]
        if total and sd.keys() != total.keys():
            raise CheckpointError(f"{p} holds a different model than {paths[0]}")
        for k, v in sd.items():
            if v.is_floating_point():
                total[k] = total[k] + v.double() if k in total else v.double().clone()
            else:
                total[k] = v.clone()
    ref = load_checkpoint(paths[-1])["model"]
    return {k: (v / len(paths)).to(ref[k].dtype) if ref[k].is_floating_point() else v
            for k, v in total.items()}


# ----------------------------------------------------------------------------- initialising from another run


def init_modules(model: torch.nn.Module, path: str | Path, prefixes: list[str]) -> list[str]:
    """Copy the parameters and buffers whose names start with one of ``prefixes`` (e.g.
    ``["encoder."]``) from the model in checkpoint ``path`` (a training checkpoint or an
    averaged model) into ``model``; everything else keeps its fresh initialisation.
    WeNet's ``--enc_init`` / ``--enc_init_mods``: a BPE model can start from the encoder of
    a char model (or any pretrained encoder of the same architecture).

    Strict about what it does copy: every prefix must match at least one entry of ``model``
    and every such entry must be in the checkpoint with the same shape, else
    :class:`CheckpointError` names the first offending key (a different ``output_size`` or
    ``num_blocks`` is refused, not silently skipped).  Returns the copied names.
    """
    prefixes = [p for p in prefixes if p]
    if not prefixes:
        raise CheckpointError("init_modules: no module prefix given (e.g. 'encoder.')")
    source = load_checkpoint(path)["model"]
    target = model.state_dict()
    copied: list[str] = []
    for prefix in prefixes:
        names = [k for k in target if k.startswith(prefix)]
        if not names:
            raise CheckpointError(f"init from {path}: the model has no parameter whose name starts with '{prefix}' "
                                  f"(its top-level modules: {sorted({k.split('.')[0] + '.' for k in target})})")
        for name in names:
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
