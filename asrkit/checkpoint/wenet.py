"""WeNet checkpoints in asrkit: the one place where WeNet's parameter names differ from
asrkit's.

A WeNet ``.pt`` is its ``model.state_dict()``.  Every key is accounted for:

* ``encoder.global_cmvn.mean`` / ``.istd``: the model's CMVN, asrkit's ``cmvn.mean`` /
  ``cmvn.istd``;
* ``encoder.embed.out.0.*`` (4× subsampling) and ``encoder.embed.linear.*`` (6×, 8×):
  the subsampling projection, asrkit's ``encoder.embed.out.*``;
* ``decoder.embed.0.weight`` and ``decoder.{left,right}_decoder.embed.0.weight``: the
  token embedding, asrkit's ``...embed.weight``;
* the positional tables WeNet saves (``encoder.embed.pos_enc.pe``,
  ``decoder[.{left,right}_decoder].embed.1.pe``, asrkit's ``encoder.embed.pos_enc.pe`` and
  ``decoder[...].pos_enc.pe``): a weight of the model when the model has that name -- Whisper's
  encoder table (``abs_pos_whisper``) and its decoder's learned one (``input_layer:
  embed_learnable_pe``) -- loaded as they are; otherwise WeNet's sinusoid buffer, compared
  with the sinusoid to float32's rounding (:func:`check_table`) and dropped (asrkit
  computes it);
* every other key keeps its name (asrkit's modules carry WeNet's names).

What is left must then match the model exactly (:func:`asrkit.checkpoint.weights.load_weights`
refuses one missing or one extra key, naming it).
"""
from __future__ import annotations

import re

import torch

from asrkit.checkpoint.load import CheckpointError
from asrkit.models.embedding import sinusoid_table

# (WeNet name pattern, asrkit name template)
_RENAMES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"^encoder\.global_cmvn\.(mean|istd)$"), r"cmvn.\1"),
    (re.compile(r"^encoder\.embed\.out\.0\.(weight|bias)$"), r"encoder.embed.out.\1"),
    (re.compile(r"^encoder\.embed\.linear\.(weight|bias)$"), r"encoder.embed.out.\1"),
    (re.compile(r"^decoder\.((?:left_decoder|right_decoder)\.)?embed\.0\.weight$"), r"decoder.\1embed.weight"),
)
# WeNet's positional tables (loaded as weights where the model has them, else checked and dropped)
# and their asrkit names
_TABLES = re.compile(r"^(encoder\.embed\.pos_enc|decoder\.(?:(?:left|right)_decoder\.)?embed\.1)\.pe$")
_TABLE_NAME = (re.compile(r"^(decoder\.(?:(?:left|right)_decoder\.)?)embed\.1\.pe$"), r"\1pos_enc.pe")
# Row p of a float32 table holds sin/cos of the float32 angle p * inv_freq: exp, the product
# and sin/cos each round, differently on each CPU's vector kernels (AVX2, AVX-512), so two
# correct tables differ by up to a few float32 ulps of the angle -- growing with p (2.4e-4 at
# p = 5000 was seen between two machines).  A table of another formula differs by O(1).
_TABLE_ULPS = 4.0


def is_wenet_state(state: dict, model_keys=()) -> bool:
    """Whether ``state`` (a bare state dict) uses WeNet's names: it holds a key only
    WeNet writes (a saved ``pe`` table, ``encoder.global_cmvn.*``, or a renamed layer) that
    is not one of ``model_keys`` (the state names of the model it is for: asrkit's Whisper
    keeps its encoder's table, ``encoder.embed.pos_enc.pe``, as a weight of its own, so
    that asrkit's own Whisper checkpoint is not WeNet's: pass the model's keys)."""
    own = set(model_keys)
    return any((_TABLES.match(k) or any(p.match(k) for p, _ in _RENAMES)) and k not in own for k in state)


def check_table(name: str, table: torch.Tensor, source: str) -> None:
    """:class:`CheckpointError` unless ``table [1, N, d]`` is the sinusoid table of
    :func:`asrkit.models.embedding.sinusoid_table` for positions ``0 .. N−1`` as any float32
    implementation computes it: row ``p`` within ``4 · eps32 · (p + 1)`` of the exact (float64)
    values."""
    if table.dim() != 3 or table.size(0) != 1 or table.size(2) % 2:
        raise CheckpointError(f"{source}: '{name}' has shape {tuple(table.shape)}, not a positional "
                              f"table [1, N, d]")
    positions = torch.arange(table.size(1))
    want = sinusoid_table(positions, table.size(2), dtype=torch.float64)
    allowed = _TABLE_ULPS * torch.finfo(torch.float32).eps * (positions.to(torch.float64) + 1.0)
    diff = (table[0].to(torch.float64) - want).abs()
    if table.numel() and float((diff - allowed.unsqueeze(1)).max()) > 0:
        raise CheckpointError(f"{source}: '{name}' is not the sinusoid positional table asrkit computes "
                              f"(max difference {float(diff.max()):.2e}); this model's positions cannot be reproduced")


def from_wenet_state(state: dict, source: str, model_keys=()) -> dict:
    """``state`` (WeNet names) with asrkit's names: a positional table loaded as a weight
    when its asrkit name is one of ``model_keys`` (the state names of the model it is for),
    else checked and dropped.  Raises :class:`CheckpointError` naming ``source`` and the key
    for a dropped table that is not the sinusoid, or for two WeNet keys that map to one
    asrkit key."""
    own = set(model_keys)
    out: dict = {}
    for name, tensor in state.items():
        if _TABLES.match(name):
            new = _TABLE_NAME[0].sub(_TABLE_NAME[1], name)
            if new in own:
                out[new] = tensor
            else:
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
