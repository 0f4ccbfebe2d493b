"""One block of the transformer and conformer encoders.

Each block has two entry points: ``forward`` for a whole (padded) batch under an
attention mask, and ``forward_chunk`` for one chunk of a stream, with the caches of the
frames before it.  Cache shapes per block (WeNet's): ``att_cache [1, H, C, 2·d_k]`` (the
self-attention keys then values of the ``C`` cached frames) and ``cnn_cache [1, D,
kernel − 1]`` (the convolution module's inputs of the frames before the chunk; ``[1, D,
0]`` without a causal convolution).  An empty tensor (any dimension 0) is an empty cache.
``forward_chunk`` also takes the chunks of ``N`` streams at once (one row each, every size
above with ``N`` for 1; :meth:`asrkit.models.encoder.BaseEncoder.forward_chunks`).
"""
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

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1|T, T]`` allowed keys, ``pos_emb`` from the
        embedding; ``valid [B, 1, T]`` (the frames inside the utterances) is unused here."""
        h = self.norm1(x) if self.normalize_before else x
        return self.feed_forward_residual(self.attention_residual(x, self.self_attn(h, h, h, mask, pos_emb)))

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk ``x [1, T, D]`` -> ``(out [1, T, D], new_att_cache [1, H, C + T,
        2·d_k], new_cnn_cache [1, D, 0])``; ``mask``, ``pos_emb``, ``att_cache`` as in
        :meth:`MultiHeadedAttention.forward_chunk`; ``cnn_cache`` is unused."""
        h = self.norm1(x) if self.normalize_before else x
        att, new_att_cache = self.self_attn.forward_chunk(h, mask, pos_emb, att_cache)
        x = self.feed_forward_residual(self.attention_residual(x, att))
        return x, new_att_cache, x.new_zeros([x.size(0), x.size(2), 0])

    def attention_residual(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(att)
        return x if self.normalize_before else self.norm1(x)

    def feed_forward_residual(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm2(x) if self.normalize_before else x
        x = x + self.dropout(self.feed_forward(h))
        return x if self.normalize_before else self.norm2(x)


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

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1|T, T]`` allowed keys of the self-attention,
        ``pos_emb`` from the embedding, ``valid [B, 1, T]`` the frames inside the
        utterances (for the convolution; defaults to ``mask``, which must then be
        ``[B, 1, T]``).  The convolution module does not read ``mask``: a chunk mask limits
        attention only (as in WeNet), so only a causal convolution keeps a frame independent
        of later chunks."""
        frames = mask
        if valid is not None:
            frames = valid
        x = self.macaron_branch(x)
        h = self.norm_mha(x) if self.normalize_before else x
        x = self.attention_residual(x, self.self_attn(h, h, h, mask, pos_emb))
        if self.conv_module is not None and self.norm_conv is not None:
            h = self.norm_conv(x) if self.normalize_before else x
            x = self.conv_residual(x, self.conv_module(h, frames))
        return self.feed_forward_branch(x)

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk ``x [1, T, D]`` -> ``(out [1, T, D], new_att_cache [1, H, C + T, 2·d_k],
        new_cnn_cache [1, D, kernel − 1])`` (see the module docstring and
        :meth:`ConvolutionModule.forward_chunk`; ``[1, D, 0]`` without a causal
        convolution).  ``mask``, ``pos_emb``, ``att_cache`` as in
        :meth:`MultiHeadedAttention.forward_chunk`."""
        x = self.macaron_branch(x)
        h = self.norm_mha(x) if self.normalize_before else x
        att, new_att_cache = self.self_attn.forward_chunk(h, mask, pos_emb, att_cache)
        x = self.attention_residual(x, att)
        new_cnn_cache = x.new_zeros([x.size(0), x.size(2), 0])
        if self.conv_module is not None and self.norm_conv is not None:
            h = self.norm_conv(x) if self.normalize_before else x
            conv, new_cnn_cache = self.conv_module.forward_chunk(h, cnn_cache)
            x = self.conv_residual(x, conv)
        return self.feed_forward_branch(x), new_att_cache, new_cnn_cache

    def macaron_branch(self, x: torch.Tensor) -> torch.Tensor:
        if self.feed_forward_macaron is not None and self.norm_ff_macaron is not None:
            h = self.norm_ff_macaron(x) if self.normalize_before else x
            x = x + 0.5 * self.dropout(self.feed_forward_macaron(h))
            if not self.normalize_before:
                x = self.norm_ff_macaron(x)
        return x

    def attention_residual(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(att)
        return x if self.normalize_before else self.norm_mha(x)

    def conv_shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution branch's residual input: ``x`` itself (a strided block pools it)."""
        return x

    def conv_residual(self, x: torch.Tensor, conv: torch.Tensor) -> torch.Tensor:
        x = self.conv_shortcut(x) + self.dropout(conv)
        if not self.normalize_before and self.norm_conv is not None:
            x = self.norm_conv(x)
        return x

    def feed_forward_branch(self, x: torch.Tensor) -> torch.Tensor:
        """``+ ff_scale·FFN``, then the final LayerNorm (with a conv module)."""
        h = self.norm_ff(x) if self.normalize_before else x
        x = x + self.ff_scale * self.dropout(self.feed_forward(h))
        if not self.normalize_before:
            x = self.norm_ff(x)
        if self.norm_final is not None:
            x = self.norm_final(x)
        return x
