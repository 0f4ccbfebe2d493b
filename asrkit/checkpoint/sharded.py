"""Sharded checkpoints: the parts of a training checkpoint that every rank holds a shard of
(an FSDP run's model and optimizer state), written by every rank with
``torch.distributed.checkpoint`` (DCP) into the folder ``<name>.dcp`` beside the checkpoint
``<name>.pt`` (``asrkit.checkpoint.names.sharded_folder``), and read back on any number of ranks (DCP re-shards
on load; one process reads it whole).

**The weights-only rule.**  asrkit never unpickles a file it did not check.  DCP stores any
non-tensor value with ``torch.save`` and reads it with ``weights_only=False``, and its
``.metadata`` file is always a pickle.  So:

* only tensors go into the folder (:func:`write_sharded` refuses anything else): every
  non-tensor entry of the checkpoint (optimizer hyper-parameters, scheduler, sampler, RNG,
  config) is in the plain ``<name>.pt``, which ``torch.load(weights_only=True)`` reads;
* the SHA-256 and size of **every** file of the folder are recorded in the ``.pt`` (itself
  checked against the digest of its ``.yaml`` record) when the folder is complete, and
  ``asrkit.checkpoint.load.verify_sharded`` checks them all before DCP opens any of them
  (:func:`read_sharded`): a changed, truncated, missing or added file is a
  :class:`~asrkit.checkpoint.load.CheckpointError`, and ``.metadata`` is unpickled only
  when its bytes are the ones asrkit wrote.

**Crash safety.**  The ranks write into a temporary folder (``asrkit.files.temporary_folder``);
once DCP has finished (every rank's files are written, rank 0 has written ``.metadata``),
rank 0 hashes the files and renames the folder into place; the ``.pt`` that names it is
written after that, atomically, and the ``.yaml`` record last.  A crash at any point leaves
the previous complete checkpoint as the newest one that loads: a folder without its ``.pt``
is not a checkpoint, and is removed with the temporaries at the next start
(``asrkit.checkpoint.save.remove_stale_temporaries``) or when its step is pruned.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from asrkit.checkpoint.load import CheckpointError, verify_sharded
from asrkit.checkpoint.names import sharded_folder
from asrkit.files import file_digest, replace_folder, temporary_folder


def _tensor_leaves_only(tree: Any, where: str = "") -> None:
    if isinstance(tree, dict):
        for k, v in tree.items():
            _tensor_leaves_only(v, f"{where}.{k}" if where else str(k))
    elif not isinstance(tree, torch.Tensor):
        raise TypeError(f"sharded checkpoint entry {where} is a {type(tree).__name__}: only tensors go into "
                        f"the DCP folder (the weights-only rule, asrkit.checkpoint.sharded)")


def write_sharded(path: str | Path, tensors: dict, is_main: bool) -> Optional[dict]:
    """Every rank: write ``tensors`` (nested dicts of tensors and ``DTensor`` shards only)
    into the shard folder of ``path`` (``sharded_folder``) (see the module docstring).  Returns, on rank 0
    (``is_main``), the record the ``.pt`` keeps: ``{"folder": its name, "files": {file name:
    {"sha256", "bytes"}}}``; None on the others.  :class:`CheckpointError` when a write fails
    (DCP reports one rank's failure on every rank)."""
    import torch.distributed.checkpoint as dcp  # (defers DCP: only sharded runs need it)
    _tensor_leaves_only(tensors)
    final = sharded_folder(path)
    tmp = temporary_folder(final)
    try:
        dcp.save(tensors, checkpoint_id=str(tmp))
    except Exception as e:  # DCP wraps every rank's OSError in one CheckpointException
        raise CheckpointError(f"could not write the shards of {Path(path).name} into {tmp}: "
                              f"{str(e).splitlines()[0][:300] if str(e) else type(e).__name__} -- the previous "
                              f"checkpoints are intact") from e
    if not is_main:
        return None
    files = {p.name: {"sha256": file_digest(p), "bytes": p.stat().st_size} for p in sorted(tmp.iterdir())}
    try:
        replace_folder(tmp, final)
    except OSError as e:
        raise CheckpointError(f"could not rename {tmp} to {final}: {e} -- the previous checkpoints are intact") from e
    return {"folder": final.name, "files": files}


def read_sharded(path: str | Path, record: dict, target: dict, distributed: bool) -> None:
    """Fill ``target`` (nested dicts of tensors or ``DTensor`` shards, the layout that was
    written; DCP re-shards for this world size) from checkpoint ``path``'s shards, after
    ``verify_sharded``.  ``distributed``: every rank of the process group calls it and
    each reads its shards; else this process reads what ``target`` asks for alone."""
    import torch.distributed.checkpoint as dcp  # (defers DCP: only sharded checkpoints need it)
    folder = verify_sharded(path, record)
    try:
        dcp.load(target, checkpoint_id=str(folder), no_dist=not distributed)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path}: its shards in {folder.name} do not fit this model and optimizer "
                              f"({str(e).splitlines()[0][:300] if str(e) else type(e).__name__})") from e
