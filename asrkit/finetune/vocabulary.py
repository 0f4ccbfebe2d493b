"""A changed vocabulary between a model and the run that starts from it.

The layers sized by the vocabulary are declared by the modules that own them
(``VOCABULARY_LAYERS`` of the CTC head, the attention decoder, the transducer's predictor
and joint): :func:`vocabulary_prefixes` finds them in any model.  :func:`vocabulary_change`
compares what a checkpoint was trained with -- the units digest every asrkit checkpoint
records (``asrkit.config_files.INPUT_DIGESTS``), the units file its config names when it can be
read, and the size of its output layers -- with this run's units: a different size, or the
same size with other meanings (two units swapped), is a change; reusing the old output
layers would then decode one unit as another without a word (NeMo #15778).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from torch import nn

from asrkit.config_files import INPUT_DIGESTS, input_digests
from asrkit.files import file_digest
from asrkit.text.units import UnitsError, read_units

REINIT_OPTION = "--reinit_output_layers (config: reinit_output_layers: true)"


def vocabulary_prefixes(model: nn.Module) -> list[str]:
    """Parameter-name prefixes (``ctc.ctc_lo.``, ``decoder.embed.`` ...) of every layer of
    ``model`` whose size is the vocabulary."""
    found = []
    for name, module in model.named_modules():
        for attr in getattr(type(module), "VOCABULARY_LAYERS", ()):
            if getattr(module, attr, None) is not None:
                found.append(f"{name}.{attr}." if name else f"{attr}.")
    return found


def _vocabulary_size(state: dict, prefixes: Sequence[str]) -> Optional[int]:
    """The vocabulary size of ``state``: the first dimension of its first output layer."""
    for prefix in prefixes:
        weight = state.get(f"{prefix}weight")
        if weight is not None:
            return int(weight.shape[0])
    return None


def _units_of(path: Optional[str], digest: Optional[str]) -> Optional[list[str]]:
    """The units of file ``path`` in id order, when it can be read and (with ``digest``) is
    the file that digest was taken of; None otherwise."""
    if not path or not Path(path).is_file():
        return None
    try:
        if digest and file_digest(path) != digest:
            return None
        return read_units(path)
    except (OSError, ValueError, UnitsError):
        return None


def _describe(path: Optional[str], size: Optional[int], digest: Optional[str]) -> str:
    words = [f"{size} units" if size is not None else "units of unknown size"]
    if digest:
        words.append(f"SHA-256 {digest[:12]}...")
    return f"{path or 'an unrecorded units file'} ({', '.join(words)})"


def _differences(old: list[str], new: list[str]) -> str:
    """A few words on how two unit lists differ (for the refusal)."""
    moved = [(i, u, new.index(u)) for i, u in enumerate(old) if u in new and new.index(u) != i]
    dropped = [u for u in old if u not in new]
    added = [u for u in new if u not in old]
    parts = []
    if moved:
        i, unit, j = moved[0]
        parts.append(f"{len(moved)} unit(s) at other ids (e.g. '{unit}': {i} there, {j} here)")
    if dropped:
        parts.append(f"{len(dropped)} dropped")
    if added:
        parts.append(f"{len(added)} new")
    return "; ".join(parts)


def vocabulary_change(checkpoint: dict, source: str, cfg, model: nn.Module, state: dict) -> Optional[str]:
    """Why the vocabulary of ``checkpoint`` (its model ``state``, under ``model``'s names)
    differs from this run's (``cfg``'s units file, ``model``'s output size) -- one line
    naming both vocabularies and :data:`REINIT_OPTION` -- or None when it is the same.
    A checkpoint without a units digest (WeNet's) is compared by size alone."""
    prefixes = vocabulary_prefixes(model)
    old_size = _vocabulary_size(state, prefixes)
    new_size = _vocabulary_size(model.state_dict(), prefixes)
    recorded = (checkpoint.get(INPUT_DIGESTS) or {}).get("units")
    current = input_digests(cfg).get("units")
    new_path = cfg.tokenizer_conf.symbol_table_path
    old_path = ((checkpoint.get("config") or {}).get("tokenizer_conf") or {}).get("symbol_table_path")
    if old_size == new_size and (not recorded or not current or recorded == current):
        return None
    old_units, new_units = _units_of(old_path, recorded), _units_of(new_path, None)
    if old_size == new_size and old_units is not None and old_units == new_units:
        return None  # (other bytes, the same units: e.g. another line ending)
    how = _differences(old_units, new_units) if old_units is not None and new_units is not None else ""
    layers = ", ".join(p.rstrip(".") for p in prefixes)
    return (f"the vocabulary changed: {source} was trained with {_describe(old_path, old_size, recorded)}, this "
            f"run has {_describe(new_path, new_size, current)}{': ' + how if how else ''}; its output layers "
            f"({layers}) would be reused with other meanings -- pass {REINIT_OPTION} to start them afresh "
            f"and keep the rest")
