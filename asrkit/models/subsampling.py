"""Convolutional front ends: 2-D convolutions that subsample time by 2 (``conv2d2``, WeNet's
Efficient Conformer's), 4, 6 or 8, and Whisper's two 1-D convolutions that subsample by 2
(``conv1d2``)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.mask import valid_mask

# (kernel, stride) of each Conv2d layer, per subsampling rate
_CONV_PLANS: dict[int, list[tuple[int, int]]] = {
    2: [(3, 2)],
    4: [(3, 2), (3, 2)],
    6: [(3, 2), (5, 3)],
    8: [(3, 2), (3, 2), (3, 2)],
}
INPUT_LAYERS: dict[str, int] = {"conv2d2": 2, "conv2d": 4, "conv2d6": 6, "conv2d8": 8}


class _ConvWeightGradByOffsets(torch.autograd.Function):
    """``conv2d(x, weight, bias, stride)`` (no padding, channels-last ``x``) whose weight
    gradient is computed as one ``[C_out, N] @ [N, C_in]`` matmul per kernel offset.

    oneDNN's weight-gradient kernel for the 144→144 3×3 stride-2 convolution reaches
    only ~70 GFLOP/s on this CPU (its forward: ~165); the per-offset matmuls reach ~120
    (measured on 2 cores).  Forward and input gradient stay oneDNN's.  Results equal
    the plain convolution's up to float rounding (tests/models/test_subsampling.py)."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride: int):
        ctx.save_for_backward(x, weight)
        ctx.stride = stride
        return nn.functional.conv2d(x, weight, bias, stride=stride)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        s = ctx.stride
        c_out, c_in, kt, kf = weight.shape
        grad_out = grad_out.contiguous(memory_format=torch.channels_last)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.convolution_backward(
                grad_out, x, weight, [c_out], [s, s], [0, 0], [1, 1], False, [0, 0], 1,
                [True, False, False])[0]
        t2, f2 = grad_out.shape[2], grad_out.shape[3]
        go = grad_out.permute(0, 2, 3, 1).reshape(-1, c_out)       # [N, C_out]
        xl = x.permute(0, 2, 3, 1)                                 # [B, T, F, C_in] view
        grad_w = weight.new_empty(c_out, kt, kf, c_in)
        for i in range(kt):
            for j in range(kf):
                patch = xl[:, i:i + s * (t2 - 1) + 1:s, j:j + s * (f2 - 1) + 1:s].reshape(-1, c_in)
                grad_w[:, i, j] = go.t() @ patch
        grad_w = grad_w.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        return grad_x, grad_w, go.sum(0), None


def conv_output_length(length: int, plan: list[tuple[int, int]]) -> int:
    for kernel, stride in plan:
        length = (length - kernel) // stride + 1
    return length


class Conv2dSubsampling(nn.Module):
    """``[B, T, idim] -> [B, T', odim]`` through ReLU-activated Conv2d layers (``odim``
    channels, no padding) and a linear projection of the flattened channels × freq.

    Output frame ``t'`` depends only on input frames inside the utterance when
    ``t' < out_lengths`` (no padding is read), with
    ``T' = (T − 1) // 2`` for rate 2, ``((T − 1) // 2 − 1) // 2`` for rate 4, ``((T − 1) // 2 − 2) // 3`` for 6 and
    ``(((T − 1) // 2 − 1) // 2 − 1) // 2`` for 8.  Each output frame sees
    ``right_context + 1`` input frames.
    """

    def __init__(self, idim: int, odim: int, rate: int, pos_enc: nn.Module):
        super().__init__()
        if rate not in _CONV_PLANS:
            raise ValueError(f"subsampling rate must be one of {sorted(_CONV_PLANS)}, got {rate}")
        self.plan = _CONV_PLANS[rate]
        self.rate = rate
        freq = conv_output_length(idim, self.plan)
        if freq < 1:
            raise ValueError(f"input_dim {idim} is too small for {rate}x conv subsampling")
        layers: list[nn.Module] = []
        channels = 1
        for kernel, stride in self.plan:
            layers += [nn.Conv2d(channels, odim, kernel, stride), nn.ReLU(inplace=True)]
            channels = odim
        self.conv = nn.Sequential(*layers)
        self.out = nn.Linear(odim * freq, odim)
        self.pos_enc = pos_enc
        context, step = 0, 1
        for kernel, stride in self.plan:
            context += (kernel - 1) * step
            step *= stride
        self.right_context = context
        self.min_input_length = context + 1

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        for kernel, stride in self.plan:
            lengths = torch.div(lengths - kernel, stride, rounding_mode="floor") + 1
        return lengths

    def first_layer(self, x: torch.Tensor) -> torch.Tensor:
        """The first convolution (1 input channel) and its ReLU as patches × weights:
        ``[B, T, F] -> [B, C, T1, F1]`` in channels-last memory.

        Equal to ``relu(conv(x.unsqueeze(1)))``, but the ``k·k`` strided views of the
        input stacked as ``[B, T1, F1, k·k]`` and multiplied by the ``[C, k·k]`` weights
        write the output once, already in the layout the next convolution wants; oneDNN's
        single-input-channel kernel was as slow as the 144-channel one (memory-bound)."""
        conv = self.conv[0]
        kernel, stride = self.plan[0]
        t1 = (x.size(1) - kernel) // stride + 1
        f1 = (x.size(2) - kernel) // stride + 1
        views: list[torch.Tensor] = []
        for i in range(kernel):
            for j in range(kernel):
                views.append(x[:, i:i + stride * (t1 - 1) + 1:stride, j:j + stride * (f1 - 1) + 1:stride])
        patches = torch.stack(views, dim=-1)  # [B, T1, F1, k*k], (i, j) row-major like the weight
        out = nn.functional.linear(patches, conv.weight.reshape(conv.weight.size(0), -1), conv.bias)
        return torch.relu(out).permute(0, 3, 1, 2)  # [B, C, T1, F1], channels-last memory

    def later_layers(self, x: torch.Tensor) -> torch.Tensor:
        """The convolutions after the first (and their ReLUs)."""
        for index, layer in enumerate(self.conv):
            if index >= 2:  # conv[0] and its ReLU (conv[1]) ran in first_layer
                x = layer(x)
        return x

    @torch.jit.unused
    def _offsets_grad_applies(self, x: torch.Tensor) -> bool:
        """The per-offset weight gradient is a CPU fp32 optimisation: under autocast
        (AMP) or on an accelerator the plain convolution and its backward run instead."""
        return (x.device.type == "cpu" and x.dtype == torch.float32
                and not torch.is_autocast_enabled("cpu"))

    @torch.jit.unused
    def later_layers_for_training(self, x: torch.Tensor) -> torch.Tensor:
        """``later_layers`` with the faster weight gradient (eager training only)."""
        for layer in list(self.conv)[2:]:
            if isinstance(layer, nn.Conv2d):
                x = _ConvWeightGradByOffsets.apply(x, layer.weight, layer.bias, layer.stride[0])
            else:
                x = layer(x)
        return x

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, offset: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(x [B, T', odim], pos_emb, out_lengths [B])``; ``offset``: the index
        of the first output frame in its stream (the positional encoding's offset)."""
        x, pos_emb = self.pos_enc(self.subsample(x), offset)
        return x, pos_emb, self.output_lengths(lengths)

    def subsample(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, idim] -> [B, T', odim]``: the convolutions and the output projection,
        before the positional encoding."""
        # channels-last activations let oneDNN run the later convolutions near the
        # machine's matmul rate on CPU (the second conv is half the small conformer's FLOPs)
        x = self.first_layer(x)
        if torch.jit.is_scripting():
            x = self.later_layers(x)
        elif self.training and self._offsets_grad_applies(x):
            x = self.later_layers_for_training(x)
        else:
            x = self.later_layers(x)
        b, c, t, f = x.size()
        return self.out(x.transpose(1, 2).reshape(b, t, c * f))


class Conv1dSubsampling2(nn.Module):
    """Whisper's front end (``input_layer: conv1d2``, WeNet's ``Conv1dSubsampling2``):
    ``[B, T, idim] -> [B, T', odim]`` through ``Conv1d(idim, odim, 3, padding=1)``, GELU,
    ``Conv1d(odim, odim, 3, stride=2, padding=1)``, GELU (exact erf GELU, as Whisper's
    ``F.gelu``), then the positional encoding.  ``T' = ceil(T / 2)`` and
    ``out_lengths = ceil(lengths / 2)``.

    Padding: frames ``t >= lengths[b]`` are set to zero before each convolution, so every
    frame ``t' < out_lengths[b]`` equals that of the utterance run alone (its zero padding is
    what the convolutions' own padding gives).  For a batch of one utterance with no padding
    (Whisper's 3000-frame input) this is exactly Whisper's ``conv1``/``conv2``.  (WeNet's
    module does not zero padding frames, and its mask keeps frames ``(T + 1) % 2, +2, ...``:
    the same count as here except for an odd length in an even-length batch.)  Output frame
    ``t'`` reads input frames up to ``2t' + 2`` (``right_context`` 2, one frame needed)."""

    def __init__(self, idim: int, odim: int, pos_enc: nn.Module):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(idim, odim, 3, padding=1), nn.GELU(),
                                  nn.Conv1d(odim, odim, 3, stride=2, padding=1), nn.GELU())
        self.pos_enc = pos_enc
        self.rate = 2
        self.right_context = 2
        self.min_input_length = 1

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return torch.div(lengths + 1, 2, rounding_mode="floor")

    def subsample(self, x: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``[B, T, idim] -> [B, T', odim]`` before the positional encoding; with
        ``lengths``, frames past each length are zeroed before each convolution."""
        x = x.transpose(1, 2)  # [B, idim, T]
        if lengths is not None:
            x = x * valid_mask(lengths, x.size(2)).unsqueeze(1).to(x.dtype)
        x = self.conv[1](self.conv[0](x))
        if lengths is not None:
            x = x * valid_mask(lengths, x.size(2)).unsqueeze(1).to(x.dtype)
        return self.conv[3](self.conv[2](x)).transpose(1, 2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, offset: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(x [B, T', odim], pos_emb, out_lengths [B])`` (as :class:`Conv2dSubsampling`)."""
        x, pos_emb = self.pos_enc(self.subsample(x, lengths), offset)
        return x, pos_emb, self.output_lengths(lengths)


def build_subsampling(input_layer: str, idim: int, odim: int, pos_enc: nn.Module) -> nn.Module:
    """The front end ``encoder_conf.input_layer`` names: ``conv2d2`` / ``conv2d`` / ``conv2d6`` /
    ``conv2d8`` (:class:`Conv2dSubsampling`) or ``conv1d2`` (:class:`Conv1dSubsampling2`)."""
    if input_layer == "conv1d2":
        return Conv1dSubsampling2(idim, odim, pos_enc)
    if input_layer not in INPUT_LAYERS:
        raise ValueError(f"input_layer must be one of {sorted(INPUT_LAYERS) + ['conv1d2']}, got {input_layer!r}")
    return Conv2dSubsampling(idim, odim, INPUT_LAYERS[input_layer], pos_enc)
