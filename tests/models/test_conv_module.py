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
