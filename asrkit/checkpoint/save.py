"""Writing checkpoints: atomic full-state saves and the pruning of old step checkpoints.

A checkpoint is one file ``<model_dir>/<name>.pt`` (``step_<N>.pt`` every
``save_interval`` optimizer steps, ``epoch_<E>.pt`` at the end of epoch E) holding a dict
of tensors and plain Python types only -- model, optimizer, scheduler and grad-scaler
states, epoch, step, RNG states, sampler position and the resolved config -- so
``torch.load(weights_only=True)`` loads it and a file carrying any other pickled object
is refused.  Beside it, ``<name>.yaml`` records epoch, step and CV loss (what
``average_model --mode best`` ranks by).  The naming rule, and the order "newest" refers
to, are :mod:`asrkit.checkpoint.names`'s; reading and the resume lookup,
:mod:`asrkit.checkpoint.load`'s.

Writes are atomic: the file is written to a temporary name in the same directory,
flushed and fsync'ed, then renamed over the target; a crash or a full disk mid-write
leaves every earlier checkpoint intact (the partial temporary file is removed, or
ignored and cleaned up on the next start).  A failed write -- a full disk (``ENOSPC``),
a file-size limit (``EFBIG``), an I/O error -- raises :class:`CheckpointError` naming the
file and the operating system's reason.

A sharded run (``train_engine: torch_fsdp``) also writes a folder of shards beside the
``.pt`` before it (:mod:`asrkit.checkpoint.sharded`, which states its crash safety and
weights-only rule); the ``.pt`` then holds everything else and the digests of the shards.

Integrity: the SHA-256 of the ``.pt`` bytes, computed while they are written, is stored
in the ``.yaml`` record (``sha256``, ``bytes``).  :func:`load_checkpoint` checks it when
the record has one, so a checkpoint whose bytes changed after the write (a flipped
block, a partial copy) is refused as corrupted; ``torch.load`` alone notices a truncated
file but not changed tensor bytes.  A ``.pt`` without a record (``average_model``'s
output) is checked structurally only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
import yaml

from asrkit.checkpoint.load import CheckpointError
from asrkit.checkpoint.names import sharded_folder, step_checkpoints_beyond
from asrkit.files import WriteError, atomic_write, atomic_write_text, remove_temporaries

FORMAT_VERSION = 1


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


def remove_stale_temporaries(model_dir: str | Path) -> int:
    """Delete temp files (and shard folders being written) left by a writer that died
    mid-save, and the shard folders (``<name>.dcp``) whose ``<name>.pt`` was never written;
    returns how many.  Call it on the one process that writes the checkpoints into
    ``model_dir`` (rank 0), before any rank writes: called anywhere else it could delete a
    temporary another process is writing."""
    import shutil
    orphans = [d for d in Path(model_dir).glob("*.dcp") if d.is_dir() and not d.with_suffix(".pt").exists()]
    for folder in orphans:
        shutil.rmtree(folder, ignore_errors=True)
    return remove_temporaries(model_dir) + len(orphans)


def prune_step_checkpoints(model_dir: str | Path, keep: int) -> list[Path]:
    """Keep the newest ``keep`` ``step_*.pt`` files (training order; epoch checkpoints are
    never pruned), deleting the others with their ``.yaml`` records and shard folders;
    returns the deleted."""
    import shutil
    removed = step_checkpoints_beyond(model_dir, keep)
    for p in removed:
        p.unlink(missing_ok=True)
        p.with_suffix(".yaml").unlink(missing_ok=True)
        shutil.rmtree(sharded_folder(p), ignore_errors=True)
    return removed
