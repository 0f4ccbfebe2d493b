"""The blocks of WeNet's Squeezeformer (``wenet/models/squeezeformer``: attention.py,
positionwise_feed_forward.py, convolution.py, encoder_layer.py), with WeNet's parameter names.

Each sub-module can start with an *adaptive scale* (``adaptive_scale: true``): its input
``x`` becomes ``ada_scale · x + ada_bias`` (per channel, learned).  WeNet creates
``ada_scale`` / ``ada_bias`` whatever that key says (frozen at 1 / 0 without it), so they are
parameters here too (``requires_grad`` only with ``adaptive_scale``) and a WeNet checkpoint
loads as it is.  ``init_weights: true`` draws the linears and convolutions from WeNet's
uniform ranges (``± fan_in^-0.5``) instead of torch's defaults.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from asrkit.models.attention import RelPositionMultiHeadedAttention
from asrkit.models.layers import ChannelsFirstConvolution, Dropout, activation, conv_padding


def _uniform(bound: float, *tensors: Optional[torch.Tensor]) -> None:
    """WeNet's ``init_weights``: each tensor drawn from ``U(−bound, bound)``."""
    with torch.no_grad():
        for t in tensors:
            if t is not None:
                t.uniform_(-bound, bound)


def wenet_rel_shift(scores: torch.Tensor) -> torch.Tensor:
    """WeNet's Squeezeformer ``rel_shift`` of ``scores [..., T1, T2]`` (the same shape back):
    prepend a zero column, read the ``T1 · (T2 + 1)`` values row-major, skip the first ``T1``
    and read the rest as ``[T1, T2]``.  Its position scores are against absolute table rows,
    so this is not Transformer-XL's distance shift; it is kept because WeNet's models were
    trained with it (``do_rel_shift: true``, the default)."""
    t1, t2 = scores.size(-2), scores.size(-1)
    lead = scores.shape[:-2]
    flat = F.pad(scores, (1, 0)).reshape(lead + (t1 * (t2 + 1),))
    return flat[..., t1:].reshape(lead + (t1, t2))


class SqueezeformerAttention(RelPositionMultiHeadedAttention):
    """WeNet's relative-position self-attention of the Squeezeformer: asrkit's ``rel_pos``
    attention (:class:`~asrkit.models.attention.RelPositionMultiHeadedAttention`) on the
    adaptively scaled input, with the position scores passed through :func:`wenet_rel_shift`
    when ``do_rel_shift``."""

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float, do_rel_shift: bool,
                 adaptive_scale: bool, init_weights: bool):
        super().__init__(n_head, n_feat, dropout_rate)
        self.do_rel_shift = do_rel_shift
        self.adaptive_scale = adaptive_scale
        self.ada_scale = nn.Parameter(torch.ones(1, 1, n_feat), requires_grad=adaptive_scale)
        self.ada_bias = nn.Parameter(torch.zeros(1, 1, n_feat), requires_grad=adaptive_scale)
        if init_weights:
            bound = n_feat ** -0.5
            _uniform(bound, self.linear_q.weight, self.linear_q.bias, self.linear_k.weight, self.linear_k.bias,
                     self.linear_v.weight, self.linear_v.bias, self.linear_pos.weight, self.linear_out.weight,
                     self.linear_out.bias)

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        if self.adaptive_scale:
            return self.ada_scale * x + self.ada_bias
        return x

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor, pos_emb: Optional[torch.Tensor] = None,
                kv_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Self-attention of ``query [B, T, D]`` (``key`` and ``value`` are the same tensor)."""
        if kv_index is not None:
            raise ValueError("the squeezeformer's attention is self-attention only (no kv_index)")
        x = self.scale(query)
        q, k, v = self.qkv(x, x, x)
        return self.attend_heads(q, k, v, mask, pos_emb)

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`MultiHeadedAttention.forward_chunk
        <asrkit.models.attention.MultiHeadedAttention.forward_chunk>`, on the scaled input
        (the cache holds the keys and values of scaled inputs, WeNet's)."""
        q, k, v = self.qkv(self.scale(x), self.scale(x), self.scale(x))
        if cache.size(0) > 0 and cache.size(2) > 0:
            k = torch.cat([cache[..., :self.d_k], k], dim=2)
            v = torch.cat([cache[..., self.d_k:], v], dim=2)
        if mask is None:
            mask = torch.ones(1, 1, k.size(2), dtype=torch.bool, device=x.device)
        return self.attend_heads(q, k, v, mask, pos_emb), torch.cat([k, v], dim=-1)

    def attend_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     pos_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """``pos_emb [1, Tk, D]``: the table rows of the keys (one per key)."""
        q_v = q + self.pos_bias_v.unsqueeze(1).to(q.dtype)
        scores = torch.matmul(q_v, self.projected_positions(pos_emb).transpose(-2, -1))
        if self.do_rel_shift:
            scores = wenet_rel_shift(scores)
        return self.attend_with_position(q, k, v, scores * (1.0 / math.sqrt(self.d_k)), mask)


class SqueezeformerFeedForward(nn.Module):
    """``w_2(dropout(act(w_1(scale(x)))))``, ``D -> D · feed_forward_expansion_factor -> D``."""

    def __init__(self, size: int, hidden: int, dropout_rate: float, act: str, adaptive_scale: bool,
                 init_weights: bool):
        super().__init__()
        self.w_1 = nn.Linear(size, hidden)
        self.activation = activation(act)
        self.dropout = Dropout(dropout_rate)
        self.w_2 = nn.Linear(hidden, size)
        self.adaptive_scale = adaptive_scale
        self.ada_scale = nn.Parameter(torch.ones(1, 1, size), requires_grad=adaptive_scale)
        self.ada_bias = nn.Parameter(torch.zeros(1, 1, size), requires_grad=adaptive_scale)
        if init_weights:
            _uniform(size ** -0.5, self.w_1.weight, self.w_1.bias)
            _uniform(hidden ** -0.5, self.w_2.weight, self.w_2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.adaptive_scale:
            x = self.ada_scale * x + self.ada_bias
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class SqueezeformerConvolution(ChannelsFirstConvolution):
    """The Squeezeformer's convolution module: ``scale(x)``, padding frames zeroed, pointwise
    convolution to ``2·D`` and GLU, depthwise convolution (``cnn_module_kernel``: centred, odd;
    or ``causal``: the ``kernel − 1`` frames before, zeros before the first), ``cnn_norm_type``
    norm, activation, pointwise convolution, padding frames zeroed.  As WeNet's, the padding is
    zeroed at the module's input only: a frame near an utterance's end reads the GLU of a
    zero input (the first pointwise convolution's bias) after it."""

    def __init__(self, channels: int, kernel_size: int, act: str, norm: str, causal: bool,
                 adaptive_scale: bool, init_weights: bool):
        super().__init__()
        padding, self.lorder = conv_padding(kernel_size, causal, "cnn_module_kernel")
        self.channels = channels
        self.causal = causal
        self.adaptive_scale = adaptive_scale
        self.ada_scale = nn.Parameter(torch.ones(1, 1, channels), requires_grad=adaptive_scale)
        self.ada_bias = nn.Parameter(torch.zeros(1, 1, channels), requires_grad=adaptive_scale)
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, padding=padding, groups=channels)
        self.use_layer_norm = norm == "layer_norm"
        self.norm: nn.Module = nn.LayerNorm(channels) if self.use_layer_norm else nn.BatchNorm1d(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)
        self.activation = activation(act)
        if init_weights:
            _uniform(channels ** -0.5, self.pointwise_conv1.weight, self.pointwise_conv1.bias,
                     self.pointwise_conv2.weight, self.pointwise_conv2.bias)
            _uniform(kernel_size ** -0.5, self.depthwise_conv.weight, self.depthwise_conv.bias)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [B, T, D]``, ``valid [B, 1, T]`` (``None``: every frame) -> ``[B, T, D]``."""
        x = self.scaled_input(x, valid)
        if self.lorder > 0:
            x = F.pad(x, (self.lorder, 0), "constant", 0.0)
        return self.convolve(x, valid)

    def forward_chunk(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk ``x [N, T, D]``; ``cache [N, D, kernel − 1]`` the scaled inputs of the
        frames before it (an empty tensor: the start, zeros).  Returns ``(out, new_cache)``,
        ``new_cache [N, D, 0]`` for a centred convolution (which does not stream)."""
        x = self.scaled_input(x, None)
        if self.lorder == 0:
            return self.convolve(x, None), x.new_zeros([x.size(0), self.channels, 0])
        if cache.dim() < 3 or cache.size(2) == 0:
            x = F.pad(x, (self.lorder, 0), "constant", 0.0)
        else:
            x = torch.cat([cache.to(x.dtype), x], dim=2)
        return self.convolve(x, None), x[:, :, x.size(2) - self.lorder:]

    def scaled_input(self, x: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        """``scale(x)`` channels first, ``[B, D, T]``, padding frames zero."""
        if self.adaptive_scale:
            x = self.ada_scale * x + self.ada_bias
        x = x.transpose(1, 2)
        if valid is not None:
            x = x.masked_fill(~valid, 0.0)
        return x

    def convolve(self, x: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        """The convolutions of ``x [B, D, T (+ left padding)]`` -> ``[B, T, D]``."""
        x = self.pointwise_conv2(self.activation(self.glu_depthwise_norm(x)))
        if valid is not None:
            x = x.masked_fill(~valid, 0.0)
        return x.transpose(1, 2)


class SqueezeformerEncoderLayer(nn.Module):
    """One Squeezeformer block, four residual sub-blocks (MHSA, FFN, convolution, FFN):
    ``x + dropout(f(x))`` then a LayerNorm (``layer_norm1..4``; post-norm, WeNet's default), or
    with ``normalize_before`` ``x + dropout(f(LayerNorm(x)))``.  ``dropout`` is the
    encoder's ``dropout`` key; the FFNs' inner dropout is ``feed_forward_dropout_rate``."""

    def __init__(self, size: int, self_attn: nn.Module, ffn1: SqueezeformerFeedForward,
                 conv_module: SqueezeformerConvolution, ffn2: SqueezeformerFeedForward,
                 normalize_before: bool, dropout_rate: float):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.layer_norm1 = nn.LayerNorm(size)
        self.ffn1 = ffn1
        self.layer_norm2 = nn.LayerNorm(size)
        self.conv_module = conv_module
        self.layer_norm3 = nn.LayerNorm(size)
        self.ffn2 = ffn2
        self.layer_norm4 = nn.LayerNorm(size)
        self.normalize_before = normalize_before
        self.dropout = Dropout(dropout_rate)

    def norm(self, x: torch.Tensor, k: int, pre: bool) -> torch.Tensor:
        """``layer_norm{k}(x)`` where it applies: on the input (``pre``) with
        ``normalize_before``, on the residual sum (not ``pre``) without; ``x`` elsewhere."""
        if pre != self.normalize_before:
            return x
        if k == 1:
            return self.layer_norm1(x)
        if k == 2:
            return self.layer_norm2(x)
        if k == 3:
            return self.layer_norm3(x)
        return self.layer_norm4(x)

    def residual(self, x: torch.Tensor, y: torch.Tensor, k: int) -> torch.Tensor:
        """``x + dropout(y)``, then ``layer_norm{k}`` when post-norm."""
        return self.norm(x + self.dropout(y), k, False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                valid: torch.Tensor) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1|T, T]`` the attention's allowed keys, ``pos_emb`` the
        table rows of the frames, ``valid [B, 1, T]`` the frames the convolution keeps."""
        h = self.norm(x, 1, True)
        x = self.residual(x, self.self_attn(h, h, h, mask, pos_emb), 1)
        x = self.residual(x, self.ffn1(self.norm(x, 2, True)), 2)
        x = self.residual(x, self.conv_module(self.norm(x, 3, True), valid), 3)
        return self.residual(x, self.ffn2(self.norm(x, 4, True)), 4)

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk ``x [1, T, D]`` -> ``(out, new_att_cache [1, H, C + T, 2·d_k],
        new_cnn_cache [1, D, kernel − 1])`` (WeNet's: no padding mask inside a chunk)."""
        att, new_att = self.self_attn.forward_chunk(self.norm(x, 1, True), mask, pos_emb, att_cache)
        x = self.residual(x, att, 1)
        x = self.residual(x, self.ffn1(self.norm(x, 2, True)), 2)
        conv, new_cnn = self.conv_module.forward_chunk(self.norm(x, 3, True), cnn_cache)
        x = self.residual(x, conv, 3)
        return self.residual(x, self.ffn2(self.norm(x, 4, True)), 4), new_att, new_cnn
