"""Streaming resampling (``asrkit.stream.resample``): any cutting of a stream gives the whole
signal's resampling, at bounded state."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from asrkit.data.audio import resample
from asrkit.stream.resample import StreamResampler


def streamed(x: torch.Tensor, orig: int, new: int, sizes) -> torch.Tensor:
    r = StreamResampler(orig, new)
    pieces, at, i = [], 0, 0
    while at < x.numel():
        n = sizes[i % len(sizes)]
        pieces.append(r.accept(x[at:at + n]))
        at, i = at + n, i + 1
    pieces.append(r.finish())
    return torch.cat(pieces)


@pytest.mark.parametrize("orig, new", [(8000, 16000), (16000, 8000), (44100, 16000), (48000, 16000)])
@pytest.mark.parametrize("sizes", [[1], [160, 7, 1601], [100000]])
def test_any_cutting_gives_the_whole_signals_resampling(orig, new, sizes):
    length = (orig // 4 if sizes != [1] else orig // 32) + 37  # (one-sample pieces: a shorter signal)
    x = torch.from_numpy(np.random.default_rng(orig).normal(0, 0.2, length).astype(np.float32))
    want = resample(x[None], orig, new)[0]
    got = streamed(x, orig, new, sizes if sizes != [1] else [1, 2, 3])
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-6)


def test_equal_rates_pass_through_and_state_stays_bounded():
    x = torch.randn(800)
    same = StreamResampler(16000, 16000)
    assert torch.equal(same.accept(x), x) and same.finish().numel() == 0
    r = StreamResampler(8000, 16000)
    for _ in range(500):  # 50 s in 100 ms pieces
        r.accept(torch.randn(800))
        assert r.pending.numel() <= r.kernel.shape[-1] + r.step
    assert r.emitted == 2 * r.received - 2 * r.width  # (lag: the filter's half width)
