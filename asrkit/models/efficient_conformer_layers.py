"""The Efficient Conformer's parts (WeNet's ``wenet/efficient_conformer``: attention.py,
convolution.py, encoder_layer.py), with WeNet's parameter names.

* :class:`GroupedRelPositionMultiHeadedAttention`: WeNet's relative-position attention over
  groups of ``group_size`` frames (Burchi & Vielzeuf 2021).  Queries, keys, values and the
  projected position rows are zero-padded at their end to a multiple of ``g`` frames and re-read
  ``g`` frames at a time as WeNet reads them: the ``[T, H, d_k]`` activations of ``g``
  consecutive frames, in memory order, cut into ``H`` rows of ``g · d_k`` (so a "head" of a group
  holds parts of several heads' features when ``g`` is not a multiple of ``H``; WeNet's layout,
  kept for its weights).  Scores ``((q + u)·k + (q + v)·p) / sqrt(g · d_k)`` with ``u, v``
  ``[H, g · d_k]``; the mask keeps every ``g``-th query row and key (``mask[:, ::g, ::g]``: a
  group is allowed when its first frame is); the output is read back to frames and cut to the
  input's.  In a chunk (``forward_chunk``) nothing is masked, as in WeNet.
* :class:`StrideConvolutionModule`: the conformer convolution module with a depthwise stride
  and WeNet's padding rule: the padding frames are zeroed on the module's *input* (so they
  reach the depthwise convolution as ``GLU(bias)``, as WeNet computes them) and on its output.
  WeNet zeroes the input in place: in a post-norm block the input is the residual, whose padding
  frames are then zero too (:meth:`EfficientConformerLayer.forward` does the same, out of place).
* :class:`EfficientConformerLayer`: WeNet's ``ConformerEncoderLayer`` / ``StrideConformerEncoderLayer``:
  ``+ ½·FFN`` -> ``+ MHSA`` -> ``+ Conv`` -> ``+ ½·FFN`` -> LayerNorm; in a strided block the
  convolution keeps ``ceil(T / s)`` frames and its residual is averaged over windows of ``s``
  frames (``AvgPool1d(s, s, ceil_mode=True)``, the last window as long as what is left).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from asrkit.models.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention, allow_rows_without_keys
from asrkit.models.encoder_layer import ConformerEncoderLayer
from asrkit.models.layers import ChannelsFirstConvolution, PositionwiseFeedForward, activation


class GroupedRelPositionMultiHeadedAttention(RelPositionMultiHeadedAttention):
    """WeNet's ``grouped_rel_selfattn`` (module docstring); self-attention only."""

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float, group_size: int):
        super().__init__(n_head, n_feat, dropout_rate)
        self.group_size = group_size
        self.n_feat = n_feat
        self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k * group_size))
        self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k * group_size))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def grouped(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, T, d_k] -> [B, H, ceil(T / g), g · d_k]`` (zero frames appended first)."""
        g = self.group_size
        x = F.pad(x, (0, 0, 0, (g - x.size(2) % g) % g))
        return x.transpose(1, 2).reshape(x.size(0), -1, self.h, self.d_k * g).transpose(1, 2)

    def grouped_positions(self, pos_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """``W_pos · pos_emb`` ``[1, P, n_feat]`` grouped: ``[1, H, ceil(P / g), g · d_k]``."""
        if pos_emb is None:
            raise ValueError("grouped relative-position attention needs pos_emb")
        g = self.group_size
        p = self.linear_pos(pos_emb)
        p = F.pad(p, (0, 0, 0, (g - p.size(1) % g) % g))
        return p.reshape(p.size(0), -1, self.h, self.d_k * g).transpose(1, 2)

    def attend_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                     pos_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """Heads-split ``q [B, H, Tq, d_k]``, ``k, v [B, H, Tk, d_k]``, ``mask [B, 1|Tq, Tk]``
        (``None``: nothing masked), ``pos_emb [1, Tk, n_feat]`` -> ``[B, Tq, n_feat]``."""
        frames = q.size(2)
        g = self.group_size
        q, k, v = self.grouped(q), self.grouped(k), self.grouped(v)
        p = self.grouped_positions(pos_emb)
        scale = 1.0 / math.sqrt(self.d_k * g)
        bias = torch.matmul(q + self.pos_bias_v.unsqueeze(1).to(q.dtype), p.transpose(-2, -1)) * scale
        no_key: Optional[torch.Tensor] = None
        if mask is not None:
            mask, no_key = allow_rows_without_keys(mask[:, ::g, ::g])
            bias = bias.masked_fill(~mask[:, :, :bias.size(-1)].unsqueeze(1), float("-inf"))
        q_u = q + self.pos_bias_u.unsqueeze(1).to(q.dtype)
        out = F.scaled_dot_product_attention(q_u, k, v, attn_mask=bias,
                                             dropout_p=self.dropout_rate if self.training else 0.0)
        if no_key is not None:
            out = out.masked_fill(no_key, 0.0)
        out = out.transpose(1, 2).reshape(out.size(0), -1, self.n_feat)[:, :frames]
        return self.linear_out(out)

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`MultiHeadedAttention.forward_chunk <asrkit.models.attention.MultiHeadedAttention.forward_chunk>`
        (the cache holds ungrouped keys and values); ``mask`` must be ``None`` (WeNet masks no
        group in a chunk)."""
        if mask is not None:
            raise ValueError("grouped attention streams without an attention mask (as WeNet's)")
        q, k, v = self.qkv(x, x, x)
        if cache.size(0) > 0 and cache.size(2) > 0:
            k = torch.cat([cache[..., :self.d_k], k], dim=2)
            v = torch.cat([cache[..., self.d_k:], v], dim=2)
        return self.attend_heads(q, k, v, None, pos_emb), torch.cat([k, v], dim=-1)


class StrideConvolutionModule(ChannelsFirstConvolution):
    """WeNet's Efficient Conformer convolution module (module docstring): pointwise conv to
    ``2·d`` -> GLU -> depthwise conv (``kernel``, ``stride``; centred, or causal: the ``kernel − 1``
    frames before) -> BatchNorm / LayerNorm -> activation -> pointwise conv.  ``ceil(T / stride)``
    output frames."""

    def __init__(self, channels: int, kernel_size: int, norm: str, act: str, causal: bool, stride: int = 1):
        super().__init__()
        if kernel_size < 1 or (kernel_size % 2 == 0 and not causal):
            raise ValueError(f"a centred convolution module needs an odd kernel, got {kernel_size} (WeNet asserts it)")
        self.causal = causal
        self.lorder = kernel_size - 1 if causal else 0
        self.stride = stride
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, stride=stride,
                                        padding=0 if causal else (kernel_size - 1) // 2, groups=channels)
        self.use_layer_norm = norm == "layer_norm"
        self.norm = nn.LayerNorm(channels) if self.use_layer_norm else nn.BatchNorm1d(channels)
        self.activation = activation(act)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)

    def convolve(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, T_in]`` (a causal module's left context included) -> ``[B, C, T_out]``."""
        return self.pointwise_conv2(self.activation(self.glu_depthwise_norm(x)))

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``x [B, T, C]``, ``valid [B, 1, T]`` -> ``[B, ceil(T / stride), C]``, zero on the
        frames past ``valid[:, :, ::stride]``."""
        x = x.masked_fill(~valid.transpose(1, 2), 0.0).transpose(1, 2)
        if self.lorder > 0:
            x = F.pad(x, (self.lorder, 0))
        x = self.convolve(x)
        return x.masked_fill(~valid[:, :, ::self.stride], 0.0).transpose(1, 2)

    def forward_chunk(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk ``x [1, T, C]`` -> ``(out [1, ceil(T / stride), C], new_cache)``.  Causal:
        ``cache [1, C, ≥ kernel − 1]`` (WeNet reads its last ``kernel − 1`` frames; empty: the
        stream's start, zero inputs) and ``new_cache [1, C, kernel − 1]``, the inputs of the last
        ``kernel − 1`` frames.  Centred: the chunk alone, ``new_cache [1, C, 0]``."""
        x = x.transpose(1, 2)
        if self.lorder == 0:
            return self.convolve(x).transpose(1, 2), x.new_zeros([x.size(0), x.size(1), 0])
        if cache.size(0) == 0 or cache.size(2) == 0:
            x = F.pad(x, (self.lorder, 0))
        else:
            x = torch.cat([cache[:, :, cache.size(2) - self.lorder:].to(x.dtype), x], dim=2)
        return self.convolve(x).transpose(1, 2), x[:, :, x.size(2) - self.lorder:]


class EfficientConformerLayer(ConformerEncoderLayer):
    """One Efficient Conformer block (module docstring); ``stride`` > 1: WeNet's
    ``StrideConformerEncoderLayer`` (its ``concat_linear``, which WeNet never calls, is kept frozen
    so that a WeNet checkpoint loads as it is).  The branches are the conformer block's
    (:class:`~asrkit.models.encoder_layer.ConformerEncoderLayer`, ``forward_chunk`` included); the
    convolution's residual is :meth:`conv_shortcut`, pooled in a strided block."""

    def __init__(self, size: int, self_attn: MultiHeadedAttention, feed_forward: PositionwiseFeedForward,
                 feed_forward_macaron: Optional[PositionwiseFeedForward],
                 conv_module: Optional[StrideConvolutionModule], dropout_rate: float, normalize_before: bool,
                 stride: int = 1):
        super().__init__(size, self_attn, feed_forward, feed_forward_macaron, conv_module, dropout_rate,
                         normalize_before)
        self.stride = stride
        self.concat_linear: Optional[nn.Linear] = None
        if stride > 1:
            self.concat_linear = nn.Linear(2 * size, size).requires_grad_(False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1|T, T]``, ``pos_emb [1, T, D]``, ``valid [B, 1, T]`` ->
        ``[B, ceil(T / stride), D]``."""
        frames = mask if valid is None else valid
        x = self.macaron_branch(x)
        h = self.norm_mha(x) if self.normalize_before else x
        x = self.attention_residual(x, self.self_attn(h, h, h, mask, pos_emb))
        if self.conv_module is not None and self.norm_conv is not None:
            if self.normalize_before:
                h = self.norm_conv(x)
            else:  # (WeNet's module zeroes its input's padding in place: post-norm, that is the residual)
                x = h = x.masked_fill(~frames.transpose(1, 2), 0.0)
            x = self.conv_residual(x, self.conv_module(h, frames))
        return self.feed_forward_branch(x)

    def conv_shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """The strided block's residual: the mean of each ``stride`` frames (the last window's
        frames only), ``[B, ceil(T / stride), D]``; ``x`` itself without a stride."""
        if self.stride == 1:
            return x
        return F.avg_pool1d(x.transpose(1, 2), [self.stride], [self.stride], [0], True, False).transpose(1, 2)
