"""Chunk attention masks: WeNet's subsequent_chunk_mask semantics, and the fixed-size cache mask."""
from __future__ import annotations

import torch

from asrkit.models.mask import chunk_attention_mask, padded_cache_mask, valid_mask


def wenet_chunk_rows(size: int, chunk: int, left: int) -> torch.Tensor:
    """WeNet's definition, row by row: query i sees keys [start, end) with
    start = max((i // chunk − left) · chunk, 0) (0 when left < 0), end = min((i // chunk + 1) · chunk, size)."""
    out = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        start = 0 if left < 0 else max((i // chunk - left) * chunk, 0)
        out[i, start:min((i // chunk + 1) * chunk, size)] = True
    return out


def test_chunk_mask_is_wenets_chunk_rows_and_valid_keys():
    lengths = torch.tensor([11, 7])
    valid = valid_mask(lengths, 11).unsqueeze(1)
    for chunk in (1, 2, 3, 4, 11, 20):
        for left in (-1, 0, 1, 2):
            mask = chunk_attention_mask(valid, chunk, left)
            assert mask.shape == (2, 11, 11)
            want = wenet_chunk_rows(11, chunk, left).unsqueeze(0) & valid
            assert torch.equal(mask, want), (chunk, left)


def test_chunk_size_zero_or_negative_is_full_context():
    valid = valid_mask(torch.tensor([5, 3]), 5).unsqueeze(1)
    assert chunk_attention_mask(valid, 0, -1) is valid
    assert chunk_attention_mask(valid, -1, 2) is valid


def test_padded_cache_mask_opens_the_real_cache_rows_and_the_chunk():
    assert padded_cache_mask(0, 4, 2, torch.device("cpu")).tolist() == [[[False] * 4 + [True] * 2]]
    assert padded_cache_mask(3, 4, 2, torch.device("cpu")).tolist() == [[[False] + [True] * 5]]
    assert padded_cache_mask(9, 4, 1, torch.device("cpu")).tolist() == [[[True] * 5]]
    assert padded_cache_mask(5, 0, 3, torch.device("cpu")).tolist() == [[[True] * 3]]
