"""Global cepstral mean and variance normalisation as a model layer.  The stats file is
read by ``asrkit.data.features.load_cmvn`` (WeNet JSON)."""
from __future__ import annotations

import torch
from torch import nn


class GlobalCMVN(nn.Module):
    """``(x − mean) · istd`` over the last dimension.  ``mean`` and ``istd`` are
    buffers, so they travel with the model's ``state_dict``."""

    def __init__(self, mean: torch.Tensor, istd: torch.Tensor):
        super().__init__()
        if mean.shape != istd.shape or mean.dim() != 1:
            raise ValueError(f"CMVN mean {tuple(mean.shape)} and istd {tuple(istd.shape)} must be equal 1-D shapes")
        self.register_buffer("mean", mean.clone().float())
        self.register_buffer("istd", istd.clone().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.istd
