"""The conv2d front end's first layer (patches × weights) equals the Conv2d it replaces."""
from __future__ import annotations

import pytest
import torch

from asrkit.models.embedding import RelPositionalEncoding
from asrkit.models.subsampling import Conv2dSubsampling


@pytest.mark.parametrize("rate", [4, 6, 8])
def test_first_layer_equals_conv2d_forward_and_backward(rate):
    torch.manual_seed(0)
    m = Conv2dSubsampling(80, 16, rate, RelPositionalEncoding(16, 0.0))
    x = torch.randn(3, 61, 80)
    ours = m.first_layer(x)
    ref = m.conv[1](m.conv[0](x.unsqueeze(1)))
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    w = (m.conv[0].weight, m.conv[0].bias)
    g_ours = torch.autograd.grad(ours.square().sum(), w)
    g_ref = torch.autograd.grad(ref.square().sum(), w)
    for a, b in zip(g_ours, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    out, _, lengths = m(x, torch.tensor([61, 40, 20]))
    assert out.shape[1] == int(m.output_lengths(torch.tensor([61]))) and lengths.tolist()[0] == out.shape[1]


@pytest.mark.parametrize("rate", [4, 6, 8])
def test_training_path_gradients_equal_plain_convolutions(rate):
    torch.manual_seed(0)
    m = Conv2dSubsampling(40, 16, rate, RelPositionalEncoding(16, 0.0)).train()
    x = torch.randn(3, 67, 40)
    lengths = torch.tensor([67, 50, 30])

    def plain(x):
        h = m.conv(x.unsqueeze(1))
        b, c, t, f = h.size()
        return m.pos_enc(m.out(h.transpose(1, 2).reshape(b, t, c * f)))[0]

    ours, ref = m(x, lengths)[0], plain(x)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    params = list(m.parameters())
    g_ours = torch.autograd.grad(ours.square().sum(), params)
    g_ref = torch.autograd.grad(ref.square().sum(), params)
    for a, b in zip(g_ours, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
