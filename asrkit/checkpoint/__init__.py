"""Checkpoints, in one package (as icefall's ``checkpoint.py``): what a checkpoint file holds
and how it is written, found, read, put into a model and averaged.

* :mod:`~asrkit.checkpoint.names` -- which file of a model directory is which checkpoint,
  and their order (no torch: ``python -m asrkit.bin.checkpoints`` starts fast);
* :mod:`~asrkit.checkpoint.record` -- the ``.yaml`` record beside a ``.pt``;
* :mod:`~asrkit.checkpoint.save` -- atomic writes, pruning;
* :mod:`~asrkit.checkpoint.load` -- the weights-only, digest-checked read, the key check
  against a model, and the resume lookup;
* :mod:`~asrkit.checkpoint.sharded` -- a sharded run's folder of shards (DCP) beside its ``.pt``;
* :mod:`~asrkit.checkpoint.weights` -- a checkpoint's weights into a model (asrkit's,
  WeNet's, a fine-tuning run's base and LoRA), ``--enc_init``;
* :mod:`~asrkit.checkpoint.wenet` -- WeNet's parameter names;
* :mod:`~asrkit.checkpoint.whisper` -- OpenAI's Whisper files, their conversion (WeNet's
  converter's ``train.yaml`` and weights), and what WeNet's converter output lacks;
* :mod:`~asrkit.checkpoint.average` -- the mean of several checkpoints;
* :mod:`~asrkit.checkpoint.rng` -- the random generators' states a training checkpoint holds.

The names below are also attributes of the package (``from asrkit import checkpoint``;
``checkpoint.load_checkpoint(...)``), each imported from its module on first use, so that
importing the naming rule does not import torch.
"""
from __future__ import annotations

import importlib

_PUBLIC = {
    "names": ("CheckpointSelectionError", "checkpoint_to_decode", "training_checkpoints"),
    "record": ("read_info", "read_record"),
    "save": ("FORMAT_VERSION", "prune_step_checkpoints", "remove_stale_temporaries", "save_checkpoint"),
    "load": ("CheckpointError", "SHARDS", "check_keys", "find_resume_checkpoint", "load_checkpoint",
             "strip_module_prefix", "verify_digest", "verify_sharded"),
    "sharded": ("read_sharded", "write_sharded"),
    "weights": ("BASE_RECORD", "init_modules", "is_wenet_checkpoint", "load_weights", "model_state",
                "resolved_state"),
    "wenet": ("from_wenet_state", "is_wenet_state"),
    "average": ("average_state_dicts",),
    "rng": ("capture_rng_state", "restore_rng_state"),
}
_MODULE_OF = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'asrkit.checkpoint' has no attribute {name!r}")
    return getattr(importlib.import_module(f"asrkit.checkpoint.{module}"), name)


__all__ = sorted(_MODULE_OF)
