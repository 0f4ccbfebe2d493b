"""Global cepstral mean and variance normalisation as a model layer.  The stats file is
read by ``asrkit.data.features.load_cmvn`` (WeNet JSON)."""
from __future__ import annotations

from typing import Optional, Tuple

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


class RawFbankNormalization(nn.Module):
    """Raw fbank -> what a model's encoder reads, for models exported to take raw
    features (TorchScript archives, ONNX graphs): the data-pipeline CMVN
    (``dataset_conf.cmvn_file``, given as ``feature_cmvn = (mean, istd)``) or the model's
    own CMVN layer (``cmvn: global_cmvn``), whichever the model was trained with.
    Attributes ``feature_cmvn`` and ``cmvn`` (each a :class:`GlobalCMVN` or ``None``).
    Both at once would normalise twice: refused with ``ValueError``."""

    def __init__(self, model_cmvn: Optional[nn.Module],
                 feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None):
        super().__init__()
        if model_cmvn is not None and feature_cmvn is not None:
            raise ValueError("CMVN given twice: the model has a CMVN layer and a feature CMVN was passed")
        self.feature_cmvn = None if feature_cmvn is None else GlobalCMVN(*feature_cmvn)
        self.cmvn = model_cmvn

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        if self.feature_cmvn is not None:
            feats = self.feature_cmvn(feats)
        if self.cmvn is not None:
            feats = self.cmvn(feats)
        return feats
