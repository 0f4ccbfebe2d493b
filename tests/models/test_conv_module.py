"""The conformer convolution module's [B, T, C] computation equals the textbook
Conv1d formulation (pointwise -> GLU -> depthwise -> norm -> act -> pointwise)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from asrkit.models.layers import ConvolutionModule


def reference(m: ConvolutionModule, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    x = x.transpose(1, 2)
    x = nn.functional.glu(m.pointwise_conv1(x), dim=1)
    x = m.depthwise_conv(x.masked_fill(~mask, 0.0))
    x = m.norm(x.transpose(1, 2)).transpose(1, 2) if m.use_layer_norm else m.norm(x)
    x = m.pointwise_conv2(m.activation(x))
    return x.masked_fill(~mask, 0.0).transpose(1, 2)


@pytest.mark.parametrize("norm", ["layer_norm", "batch_norm"])
def test_matches_conv1d_formulation_forward_and_backward(norm):
    torch.manual_seed(0)
    m = ConvolutionModule(16, 7, norm, "swish").train()
    lengths = torch.tensor([20, 13, 5])
    mask = (torch.arange(20)[None, :] < lengths[:, None]).unsqueeze(1)
    x = torch.randn(3, 20, 16, requires_grad=True)
    ours, ref = m(x, mask), reference(m, x, mask)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    assert torch.all(ours[1, 13:] == 0) and torch.all(ours[2, 5:] == 0)
    params = [x, *m.parameters()]
    g_ours = torch.autograd.grad(ours.square().sum(), params)
    g_ref = torch.autograd.grad(ref.square().sum(), params)
    for a, b in zip(g_ours, g_ref):
        # (a bias before BatchNorm has a zero true gradient: compare against the scale)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def wenet_causal_reference(m: ConvolutionModule, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """WeNet's causal formulation: zero the padded frames, left-pad the *input* of the first
    pointwise convolution with ``kernel − 1`` zero frames, then an unpadded depthwise conv."""
    x = x.transpose(1, 2).masked_fill(~mask, 0.0)
    x = nn.functional.pad(x, (m.depthwise_conv.kernel_size[0] - 1, 0))
    x = nn.functional.glu(m.pointwise_conv1(x), dim=1)
    x = m.depthwise_conv(x)
    x = m.norm(x.transpose(1, 2)).transpose(1, 2) if m.use_layer_norm else m.norm(x)
    x = m.pointwise_conv2(m.activation(x))
    return x.masked_fill(~mask, 0.0).transpose(1, 2)


@pytest.mark.parametrize("norm", ["layer_norm", "batch_norm"])
def test_causal_matches_wenets_formulation_and_ignores_later_frames(norm):
    torch.manual_seed(0)
    m = ConvolutionModule(16, 7, norm, "swish", causal=True).eval()
    with torch.no_grad():
        m.pointwise_conv1.bias.normal_()  # the frames before the utterance are GLU(bias), not zeros
    lengths = torch.tensor([20, 13])
    mask = (torch.arange(20)[None, :] < lengths[:, None]).unsqueeze(1)
    x = torch.randn(2, 20, 16)
    with torch.no_grad():
        ours = m(x, mask)
        torch.testing.assert_close(ours, wenet_causal_reference(m, x, mask), rtol=1e-5, atol=1e-5)
        later = x.clone()
        later[:, 10:] = torch.randn(2, 10, 16)
        torch.testing.assert_close(m(later, mask)[:, :10], ours[:, :10])  # frame t sees only frames <= t


@pytest.mark.parametrize("norm", ["layer_norm", "batch_norm"])
def test_causal_chunks_with_cache_equal_the_whole_utterance(norm):
    torch.manual_seed(0)
    m = ConvolutionModule(16, 7, norm, "swish", causal=True).eval()
    with torch.no_grad():
        m.pointwise_conv1.bias.normal_()
        x = torch.randn(1, 23, 16)
        whole = m(x, torch.ones(1, 1, 23, dtype=torch.bool))
        padded = torch.cat([torch.zeros(1, 6, 16), x], dim=1)
        cache = torch.zeros(0, 0, 0)
        pieces = []
        for start, end in ((0, 2), (2, 11), (11, 12), (12, 23)):  # chunks shorter and longer than kernel − 1
            out, cache = m.forward_chunk(x[:, start:end], cache)
            assert cache.shape == (1, 16, 6)
            # the module inputs of the last 6 frames, zeros before the utterance
            torch.testing.assert_close(cache, padded[:, end:end + 6].transpose(1, 2))
            pieces.append(out)
        torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=1e-5, atol=1e-5)
        zero_cache_start, _ = m.forward_chunk(x[:, :5], torch.zeros(1, 16, 6))
        torch.testing.assert_close(zero_cache_start, whole[:, :5], rtol=1e-5, atol=1e-5)
