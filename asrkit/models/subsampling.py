"""Convolutional front end: 2-D convolutions that subsample time by 4, 6 or 8."""
from __future__ import annotations

import torch
from torch import nn

# (kernel, stride) of each Conv2d layer, per subsampling rate
_CONV_PLANS: dict[int, list[tuple[int, int]]] = {
    4: [(3, 2), (3, 2)],
    6: [(3, 2), (5, 3)],
    8: [(3, 2), (3, 2), (3, 2)],
}
INPUT_LAYERS: dict[str, int] = {"conv2d": 4, "conv2d6": 6, "conv2d8": 8}


def conv_output_length(length: int, plan: list[tuple[int, int]]) -> int:
    for kernel, stride in plan:
        length = (length - kernel) // stride + 1
    return length


class Conv2dSubsampling(nn.Module):
    """``[B, T, idim] -> [B, T', odim]`` through ReLU-activated Conv2d layers (``odim``
    channels, no padding) and a linear projection of the flattened channels × freq.

    Output frame ``t'`` depends only on input frames inside the utterance when
    ``t' < out_lengths`` (no padding is read), with
    ``T' = ((T − 1) // 2 − 1) // 2`` for rate 4, ``((T − 1) // 2 − 2) // 3`` for 6 and
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

    def forward(self, x: torch.Tensor, lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(x [B, T', odim], pos_emb, out_lengths [B])``."""
        # channels-last activations let oneDNN run both convolutions near the machine's
        # matmul rate on CPU (the second conv is half the small conformer's FLOPs)
        x = self.conv(x.unsqueeze(1).contiguous(memory_format=torch.channels_last))  # [B, C, T', F']
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
        x, pos_emb = self.pos_enc(x)
        return x, pos_emb, self.output_lengths(lengths)
