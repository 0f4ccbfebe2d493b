"""Padding and causal masks.  Convention: boolean masks are ``True`` where a position is
*valid* (may be attended to), matching ``scaled_dot_product_attention``'s boolean masks."""
from __future__ import annotations

import torch


def valid_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[B, max_len]`` bool, ``True`` at positions ``t < lengths[b]``."""
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


def causal_mask(size: int, device: torch.device) -> torch.Tensor:
    """``[size, size]`` bool, ``True`` where key ``j <= `` query ``i``."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def decoder_self_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[B, max_len, max_len]`` bool: query ``i`` may attend to key ``j`` iff
    ``j <= i`` and ``j < lengths[b]``."""
    keys = valid_mask(lengths, max_len).unsqueeze(1)
    return keys & causal_mask(max_len, lengths.device).unsqueeze(0)
