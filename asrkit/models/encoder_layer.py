"""One block of the transformer and conformer encoders."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.attention import MultiHeadedAttention
from asrkit.models.layers import Dropout, ConvolutionModule, PositionwiseFeedForward


class TransformerEncoderLayer(nn.Module):
    """Self-attention then feed-forward, each a residual branch with dropout.
    ``normalize_before``: LayerNorm on each branch input (pre-norm); otherwise on each
    residual sum (post-norm)."""

    def __init__(self, size: int, self_attn: MultiHeadedAttention,
                 feed_forward: PositionwiseFeedForward, dropout_rate: float,
                 normalize_before: bool):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.norm1 = nn.LayerNorm(size, eps=1e-5)
        self.norm2 = nn.LayerNorm(size, eps=1e-5)
        self.dropout = Dropout(dropout_rate)
        self.normalize_before = normalize_before

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1, T]`` valid keys, ``pos_emb`` from the embedding."""
        h = self.norm1(x) if self.normalize_before else x
        x = x + self.dropout(self.self_attn(h, h, h, mask, pos_emb))
        if not self.normalize_before:
            x = self.norm1(x)
        h = self.norm2(x) if self.normalize_before else x
        x = x + self.dropout(self.feed_forward(h))
        if not self.normalize_before:
            x = self.norm2(x)
        return x


class ConformerEncoderLayer(nn.Module):
    """Conformer block (Gulati et al. 2020):
    ``x + ½·FFN_macaron`` -> ``+ MHSA`` -> ``+ Conv`` -> ``+ ½·FFN`` -> LayerNorm.
    Without ``feed_forward_macaron`` the FFN gets weight 1; without ``conv_module`` the
    conv branch and the final LayerNorm are left out (as in WeNet)."""

    def __init__(self, size: int, self_attn: MultiHeadedAttention,
                 feed_forward: PositionwiseFeedForward,
                 feed_forward_macaron: Optional[PositionwiseFeedForward],
                 conv_module: Optional[ConvolutionModule], dropout_rate: float,
                 normalize_before: bool):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.feed_forward_macaron = feed_forward_macaron
        self.conv_module = conv_module
        self.norm_ff = nn.LayerNorm(size, eps=1e-5)
        self.norm_mha = nn.LayerNorm(size, eps=1e-5)
        self.norm_ff_macaron = nn.LayerNorm(size, eps=1e-5) if feed_forward_macaron is not None else None
        self.norm_conv = nn.LayerNorm(size, eps=1e-5) if conv_module is not None else None
        self.norm_final = nn.LayerNorm(size, eps=1e-5) if conv_module is not None else None
        self.ff_scale = 0.5 if feed_forward_macaron is not None else 1.0
        self.dropout = Dropout(dropout_rate)
        self.normalize_before = normalize_before

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1, T]`` valid frames, ``pos_emb [1, 2T−1, D]``."""
        pre = self.normalize_before
        if self.feed_forward_macaron is not None and self.norm_ff_macaron is not None:
            h = self.norm_ff_macaron(x) if pre else x
            x = x + 0.5 * self.dropout(self.feed_forward_macaron(h))
            if not pre:
                x = self.norm_ff_macaron(x)
        h = self.norm_mha(x) if pre else x
        x = x + self.dropout(self.self_attn(h, h, h, mask, pos_emb))
        if not pre:
            x = self.norm_mha(x)
        if self.conv_module is not None and self.norm_conv is not None:
            h = self.norm_conv(x) if pre else x
            x = x + self.dropout(self.conv_module(h, mask))
            if not pre:
                x = self.norm_conv(x)
        h = self.norm_ff(x) if pre else x
        x = x + self.ff_scale * self.dropout(self.feed_forward(h))
        if not pre:
            x = self.norm_ff(x)
        if self.norm_final is not None:
            x = self.norm_final(x)
        return x
