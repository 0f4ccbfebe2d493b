"""WeNet checkpoints in asrkit: the one place where WeNet's parameter names differ from
asrkit's.

A WeNet ``.pt`` is its ``model.state_dict()``.  Every key is accounted for:

* ``encoder.global_cmvn.mean`` / ``.istd``: the model's CMVN, asrkit's ``cmvn.mean`` /
  ``cmvn.istd``;
* ``encoder.embed.out.0.*`` (4× subsampling) and ``encoder.embed.linear.*`` (6×, 8×):
  the subsampling projection, asrkit's ``encoder.embed.out.*``;
* ``decoder.embed.0.weight`` and ``decoder.{left,right}_decoder.embed.0.weight``: the
  token embedding, asrkit's ``...embed.weight``;
* the sinusoid tables WeNet saves as persistent buffers (``encoder.embed.pos_enc.pe``,
  ``decoder[.{left,right}_decoder].embed.1.pe``): compared with asrkit's table to 1e-6
  and dropped (asrkit computes them);
* every other key keeps its name (asrkit's modules carry WeNet's names).

What is left must then match the model exactly (:func:`asrkit.models.state.load_weights`
refuses one missing or one extra key, naming it).
"""
from __future__ import annotations

import re

import torch

from asrkit.io.checkpoint import CheckpointError
from asrkit.models.embedding import sinusoid_table

# (WeNet name pattern, asrkit name template)
_RENAMES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"^encoder\.global_cmvn\.(mean|istd)$"), r"cmvn.\1"),
    (re.compile(r"^encoder\.embed\.out\.0\.(weight|bias)$"), r"encoder.embed.out.\1"),
    (re.compile(r"^encoder\.embed\.linear\.(weight|bias)$"), r"encoder.embed.out.\1"),
    (re.compile(r"^decoder\.((?:left_decoder|right_decoder)\.)?embed\.0\.weight$"), r"decoder.\1embed.weight"),
)
# WeNet's positional tables (checked, then dropped)
_TABLES = re.compile(r"^(encoder\.embed\.pos_enc|decoder\.(?:(?:left|right)_decoder\.)?embed\.1)\.pe$")
_TABLE_TOLERANCE = 1e-6


def is_wenet_state(state: dict) -> bool:
    """Whether ``state`` (a bare state dict) uses WeNet's names: it holds a key only
    WeNet writes (a saved ``pe`` table, ``encoder.global_cmvn.*``, or a renamed layer)."""
    return any(_TABLES.match(k) or any(p.match(k) for p, _ in _RENAMES) for k in state)


def check_table(name: str, table: torch.Tensor, source: str) -> None:
    """:class:`CheckpointError` unless ``table [1, N, d]`` is the sinusoid table asrkit
    computes for positions ``0 .. N−1`` (to 1e-6)."""
    if table.dim() != 3 or table.size(0) != 1 or table.size(2) % 2:
        raise CheckpointError(f"{source}: '{name}' has shape {tuple(table.shape)}, not a positional "
                              f"table [1, N, d]")
    want = sinusoid_table(torch.arange(table.size(1)), table.size(2))
    diff = float((table[0].float() - want).abs().max()) if table.numel() else 0.0
    if diff > _TABLE_TOLERANCE:
        raise CheckpointError(f"{source}: '{name}' is not the sinusoid positional table asrkit computes "
                              f"(max difference {diff:.2e}); this model's positions cannot be reproduced")


def from_wenet_state(state: dict, source: str) -> dict:
    """``state`` (WeNet names) with asrkit's names, positional tables checked and dropped.
    Raises :class:`CheckpointError` naming ``source`` and the key for a table that is not
    the sinusoid, or for two WeNet keys that map to one asrkit key."""
    out: dict = {}
    for name, tensor in state.items():
        if _TABLES.match(name):
            check_table(name, tensor, source)
            continue
        new = name
        for pattern, template in _RENAMES:
            if pattern.match(name):
                new = pattern.sub(template, name)
                break
        if new in out:
            raise CheckpointError(f"{source}: '{name}' and another key both map to '{new}'")
        out[new] = tensor
    return out
