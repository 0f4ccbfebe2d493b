"""The Squeezeformer's front end and time reduction (WeNet's ``wenet/models/squeezeformer/
subsampling.py`` and ``conv2d.py``), with WeNet's parameter names.

:class:`DepthwiseConv2dSubsampling4`: two 3×3 stride-2 convolutions (the second depthwise
with ``dw_stride``), each with a ReLU; the flattened channels × frequencies scaled by
``sqrt(encoder_dim)`` (WeNet's relative positional encoding, applied before the projection)
then ``input_proj`` (a linear and ``input_dropout_rate`` dropout).  Its frames follow the
convolutions (``T' = ((T − 1) // 2 − 1) // 2``) but, as WeNet's, the padding mask is cut with
``[:-2:2]`` twice (:meth:`DepthwiseConv2dSubsampling4.valid_frames`): an utterance shorter
than the batch keeps ``ceil(L / 2)`` then ``ceil(· / 2)`` frames (at most ``T'``), one or two
more than its convolution frames, which read the batch's padding.  Those are the encoder's
output lengths, as in WeNet (where they are the CTC's input lengths); an utterance alone, or
the longest of a batch, gets exactly ``T'``.

Time reduction (``time_reduction_layer_type``; before block ``reduce_idx``, halving the frame
rate; its input's padding frames zeroed first), each to ``ceil(T / 2)`` frames:

* ``conv1d``: depthwise ``Conv1d`` (kernel 5, stride 2, padding 3 both sides, the last
  output frame dropped) then a pointwise one;
* ``stream``: kernel 1, stride 2 (frame ``2t`` alone: what streams) then pointwise;
* ``conv2d``: a full (not depthwise) ``(5, 1)`` convolution of stride 2 over time, the input
  padded with 3 zero frames at its end (``T // 2`` frames, zero-padded to ``ceil(T / 2)``),
  then pointwise.  (WeNet pads to the reduced lengths' maximum, which is ``ceil(T / 2)``
  wherever WeNet runs; the frame count here follows the shapes, so it traces for ONNX.)

All three draw their weights from WeNet's uniform ranges, whatever ``init_weights`` says
(WeNet's constructors do).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asrkit.models.embedding import RelPositionalEncoding
from asrkit.models.layers import Dropout


class DepthwiseConv2dSubsampling4(nn.Module):
    """WeNet's Squeezeformer front end, 4× (module docstring)."""

    def __init__(self, input_size: int, odim: int, dw_stride: bool, input_dropout_rate: float,
                 init_weights: bool):
        super().__init__()
        freq = ((input_size - 1) // 2 - 1) // 2
        if freq < 1:
            raise ValueError(f"input_dim {input_size} is too small for the squeezeformer's 4x subsampling")
        self.pw_conv = nn.Conv2d(1, odim, 3, 2)
        self.dw_conv = nn.Conv2d(odim, odim, 3, 2, groups=odim if dw_stride else 1)
        self.pos_enc = RelPositionalEncoding(odim, 0.1)  # (WeNet's fixed positional dropout)
        self.input_proj = nn.Sequential(nn.Linear(odim * freq, odim), Dropout(input_dropout_rate))
        if init_weights:
            bound = (odim * input_size / 4) ** -0.5
            with torch.no_grad():
                self.input_proj[0].weight.uniform_(-bound, bound)
                self.input_proj[0].bias.uniform_(-bound, bound)
        self.rate = 4
        self.right_context = 6  # (3 − 1)·1 + (3 − 1)·2
        self.min_input_length = 7

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Convolution frames of unpadded inputs of ``lengths``."""
        return torch.div(torch.div(lengths - 1, 2, rounding_mode="floor") - 1, 2, rounding_mode="floor")

    @staticmethod
    def valid_frames(valid: torch.Tensor) -> torch.Tensor:
        """WeNet's mask of the subsampled frames from ``valid [B, 1, T]``: ``[:-2:2]`` twice."""
        return valid[:, :, :-2:2][:, :, :-2:2]

    def subsample(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, F] -> [B, T', odim · F']`` (the convolutions, channels then frequencies)."""
        x = torch.relu(self.dw_conv(torch.relu(self.pw_conv(x.unsqueeze(1)))))
        b, c, t, f = x.size()
        return x.transpose(1, 2).reshape(b, t, c * f)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, offset: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, T, F]``, ``valid [B, 1, T]`` -> ``(x [B, T', odim], pos_emb [1, T', odim],
        valid [B, 1, T'])``; ``offset``: the stream position of the first output frame."""
        x, pos_emb = self.pos_enc(self.subsample(x), offset)
        return self.input_proj(x), pos_emb, self.valid_frames(valid)


def _uniform(bound: float, *tensors: torch.Tensor) -> None:
    with torch.no_grad():
        for t in tensors:
            t.uniform_(-bound, bound)


class TimeReductionLayer1D(nn.Module):
    """``conv1d`` (``padding`` 3) and ``stream`` (kernel 1, ``padding`` 0) time reduction."""

    def __init__(self, channel: int, kernel_size: int = 5, stride: int = 2):
        super().__init__()
        self.padding = max(0, kernel_size - stride)
        self.dw_conv = nn.Conv1d(channel, channel, kernel_size, stride, self.padding, groups=channel)
        self.pw_conv = nn.Conv1d(channel, channel, 1)
        _uniform(kernel_size ** -0.5, self.dw_conv.weight, self.dw_conv.bias)
        _uniform(channel ** -0.5, self.pw_conv.weight, self.pw_conv.bias)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``x [B, T, D]``, ``valid [B, 1, T]`` -> ``[B, ceil(T / 2), D]``."""
        frames = (x.size(1) + 1) // 2
        y = self.pw_conv(self.dw_conv(x.transpose(1, 2).masked_fill(~valid, 0.0))).transpose(1, 2)
        return fit_frames(y, frames)


class TimeReductionLayerStream(TimeReductionLayer1D):
    """``stream``: :class:`TimeReductionLayer1D` of kernel 1 (no padding, frame ``2t``)."""

    def __init__(self, channel: int):
        super().__init__(channel, kernel_size=1, stride=2)


class TimeReductionLayer2D(nn.Module):
    """``conv2d`` time reduction (module docstring); WeNet's ``Conv2dValid`` weights
    ``[D, D, 5, 1]`` and ``[D, D, 1, 1]`` (no padding applies to a one-wide input)."""

    def __init__(self, channel: int, kernel_size: int = 5, stride: int = 2):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.dw_conv = nn.Conv2d(channel, channel, (kernel_size, 1), stride)
        self.pw_conv = nn.Conv2d(channel, channel, 1)
        _uniform(kernel_size ** -0.5, self.dw_conv.weight, self.dw_conv.bias)
        _uniform(channel ** -0.5, self.pw_conv.weight, self.pw_conv.bias)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``x [B, T, D]``, ``valid [B, 1, T]`` -> ``[B, ceil(T / 2), D]``."""
        frames = (x.size(1) + 1) // 2
        y = F.pad(x.transpose(1, 2).masked_fill(~valid, 0.0), (0, self.kernel_size - self.stride))
        y = F.conv1d(y, self.dw_conv.weight.squeeze(-1), self.dw_conv.bias, self.stride)
        y = F.conv1d(y, self.pw_conv.weight.squeeze(-1), self.pw_conv.bias)
        return fit_frames(y.transpose(1, 2), frames)


def fit_frames(x: torch.Tensor, frames: int) -> torch.Tensor:
    """``x [B, T, D]`` (``T >= frames − 1``) cut, or zero-padded by one frame at its end, to
    ``frames`` frames (one expression for both: an ONNX trace keeps it for any length)."""
    return torch.cat([x, x.new_zeros([x.size(0), 1, x.size(2)])], dim=1)[:, :frames]


TIME_REDUCTIONS = {"conv1d": TimeReductionLayer1D, "stream": TimeReductionLayerStream,
                   "conv2d": TimeReductionLayer2D}
