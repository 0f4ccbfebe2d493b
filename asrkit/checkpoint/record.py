"""The ``.yaml`` record beside a checkpoint ``<name>.pt``: epoch, step, CV loss and the
SHA-256 and size of the ``.pt`` bytes (:func:`asrkit.checkpoint.save.save_checkpoint` writes
it).  Reading it needs no torch, so the checkpoint-naming rules
(:mod:`asrkit.checkpoint.names`) and their command line start fast."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

# the record's fields that describe the .pt bytes rather than the training state
INTEGRITY_KEYS = ("sha256", "bytes")


def read_record(path: str | Path) -> Optional[dict]:
    """The whole ``.yaml`` record of checkpoint ``path``, integrity fields included; None
    when there is none or it is not a readable YAML mapping."""
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
    record = read_record(path)
    if record is None:
        return None
    return {k: v for k, v in record.items() if k not in INTEGRITY_KEYS}
