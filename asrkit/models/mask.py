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


def chunk_attention_mask(valid: torch.Tensor, chunk_size: int, num_left_chunks: int) -> torch.Tensor:
    """Self-attention mask of a chunk-streaming encoder (WeNet's ``subsequent_chunk_mask``
    combined with key validity, as its ``add_optional_chunk_mask`` does).

    ``valid [B, 1, T]`` bool (``True`` at frames inside the utterance).  Frames are split
    into chunks of ``chunk_size`` (frame ``t`` is in chunk ``t // chunk_size``).  Returns
    ``[B, T, T]`` bool: query ``i`` may attend to key ``j`` iff ``valid[b, 0, j]`` and
    ``chunk(i) − num_left_chunks <= chunk(j) <= chunk(i)`` (``num_left_chunks < 0``: every
    earlier chunk).  ``chunk_size <= 0`` means full context: ``valid`` itself is returned,
    still ``[B, 1, T]`` (every query sees every valid key).

    A query row can allow no key at all (a padded frame whose window holds only padding):
    the attention modules give such rows zero weights, never NaN."""
    if chunk_size <= 0:
        return valid
    chunk = torch.arange(valid.size(-1), device=valid.device) // chunk_size
    query, key = chunk.unsqueeze(1), chunk.unsqueeze(0)
    allowed = key <= query
    if num_left_chunks >= 0:
        allowed = allowed & (key >= query - num_left_chunks)
    return valid & allowed.unsqueeze(0)


def padded_cache_mask(valid_cache_frames: int, cache_frames: int, chunk_frames: int,
                      device: torch.device) -> torch.Tensor:
    """``[1, 1, cache_frames + chunk_frames]`` bool for one step of a *fixed-size* attention
    cache: the cache holds ``cache_frames`` rows of which only the last
    ``valid_cache_frames`` are real (the rest are the zero padding a fresh cache starts
    with), followed by the chunk's own ``chunk_frames`` frames.  ``True`` on the real cache
    rows and on the chunk; ``valid_cache_frames`` is clamped to ``[0, cache_frames]``."""
    return padded_cache_masks(torch.tensor([valid_cache_frames], device=device), cache_frames, chunk_frames)


def padded_cache_masks(valid_cache_frames: torch.Tensor, cache_frames: int, chunk_frames: int) -> torch.Tensor:
    """:func:`padded_cache_mask` of ``N`` streams sharing one fixed cache size:
    ``valid_cache_frames [N]`` (int) real rows of each -> ``[N, 1, cache_frames + chunk_frames]``."""
    real = valid_cache_frames.clamp(0, cache_frames).view(-1, 1, 1)
    positions = torch.arange(cache_frames + chunk_frames, device=valid_cache_frames.device)
    return positions >= cache_frames - real
