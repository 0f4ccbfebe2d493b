"""Spectrogram augmentation on features ``[frames, dims]``, WeNet semantics.  Every draw
comes from the caller's ``torch.Generator`` (per-sample, reproducible); inputs are
never modified in place.

* :func:`spec_aug` -- SpecAugment masking: ``num_t_mask`` time masks, each of
  ``randint[1, max_t]`` frames starting at ``randint[0, frames-1]`` (clipped at the end),
  and ``num_f_mask`` frequency masks of ``randint[1, max_f]`` bins starting at
  ``randint[0, dims-1]``; masked cells are set to 0.  With ``max_t_fraction`` (asrkit's,
  lhotse's ``max_frames_mask_fraction``) each time mask is at most
  ``floor(max_t_fraction * frames / num_t_mask)`` frames wide as well, so the masks together
  never cover more than that fraction of a short utterance (a 0.4 s isolated word is 40
  frames: two WeNet masks of up to 20 frames hide half of it); an utterance too short for a
  one-frame mask gets none.
* :func:`spec_sub` -- ``num_t_sub`` times: a span of ``randint[1, max_t]`` frames starting
  at ``start = randint[0, frames-1]`` is replaced by the span ``pos = randint[0, start]``
  frames earlier (taken from the unmodified input).
* :func:`spec_trim` -- drops the last ``randint[1, max_t]`` frames when that is less than
  half of them.
"""
from __future__ import annotations

from typing import Optional

import torch


def _randint(low: int, high: int, generator: torch.Generator) -> int:
    """Uniform integer in ``[low, high]`` (inclusive) from ``generator``."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def spec_aug(feat: torch.Tensor, generator: torch.Generator, *, num_t_mask: int, num_f_mask: int,
             max_t: int, max_f: int, max_t_fraction: Optional[float] = None) -> torch.Tensor:
    """Time and frequency masking (see the module docstring)."""
    frames, dims = feat.shape
    out = feat.clone()
    if frames == 0:
        return out
    if max_t_fraction is not None and num_t_mask > 0:
        max_t = min(max_t, int(max_t_fraction * frames / num_t_mask))
    for _ in range(num_t_mask if max_t > 0 else 0):
        start = _randint(0, frames - 1, generator)
        length = _randint(1, max_t, generator)
        out[start:min(frames, start + length), :] = 0
    for _ in range(num_f_mask):
        start = _randint(0, dims - 1, generator)
        length = _randint(1, max_f, generator)
        out[:, start:min(dims, start + length)] = 0
    return out


def spec_sub(feat: torch.Tensor, generator: torch.Generator, *, num_t_sub: int, max_t: int) -> torch.Tensor:
    """Replace spans of frames by earlier spans (see the module docstring)."""
    frames = feat.shape[0]
    out = feat.clone()
    if frames == 0:
        return out
    for _ in range(num_t_sub):
        start = _randint(0, frames - 1, generator)
        length = _randint(1, max_t, generator)
        end = min(frames, start + length)
        pos = _randint(0, start, generator)
        out[start:end, :] = feat[start - pos:end - pos, :]
    return out


def spec_trim(feat: torch.Tensor, generator: torch.Generator, *, max_t: int) -> torch.Tensor:
    """Trim trailing frames (see the module docstring)."""
    frames = feat.shape[0]
    length = _randint(1, max_t, generator)
    if length < frames / 2:
        return feat[:frames - length].clone()
    return feat.clone()
