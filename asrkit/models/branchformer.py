"""Branchformer encoder (Peng et al. 2022), WeNet's ``encoder: branchformer``
(``wenet/models/branchformer``), with its parameter names, so that a WeNet checkpoint loads
as it is.

A block runs two branches side by side on its input ``x`` and merges them into one residual:
``x + dropout(merge(attn_branch, cgmlp_branch))`` then a LayerNorm (``norm_final``), where

* the attention branch is ``dropout(MHSA(LayerNorm(x)))`` (``norm_mha``, ``attn``);
* the cgMLP branch (:class:`ConvolutionalGatingMLP`) is ``dropout(cgMLP(LayerNorm(x)))``
  (``norm_mlp``, ``cgmlp``);
* ``merge_method``: ``concat`` -- ``merge_proj([a; c])`` (a ``2D -> D`` linear);
  ``fixed_ave`` -- ``merge_proj((1 − w)·a + w·c)`` with ``w = cgmlp_weight`` (``w`` 0 or 1
  removes the other branch and its norm, as WeNet); ``learned_ave`` -- ``merge_proj(w1·a +
  w2·c)`` with ``(w1, w2)`` a softmax of two scores pooled over the utterance's frames
  (attention pooling, ``pooling_proj*`` and ``weight_proj*``), and in training the attention
  branch dropped (``w1, w2 = 0, 1``) with probability ``attn_branch_drop_rate``.  With one
  branch (``use_attn: false`` or ``use_cgmlp: false``) ``merge_proj`` is the identity.

``pooling_proj1/2`` and ``weight_proj1/2`` exist in every block (WeNet creates them whatever
the merge); only ``learned_ave`` with two branches reads them, so elsewhere they are created
frozen (``requires_grad = False``): they load from and save to WeNet's checkpoints, and DDP,
which waits for a gradient of every trainable parameter, does not wait for theirs (WeNet's
DDP finds unused parameters instead, at the cost of a graph traversal per step).

The cgMLP's depthwise convolution, like WeNet's, does not mask the padding frames of a
batch: a frame near an utterance's end reads the (non-zero) subsampled padding after it, so
an utterance's output in a padded batch can differ from its output alone.  ``causal: true``
makes that convolution causal (left padding of ``kernel − 1``), which is what streams: then
the masked full forward with a chunk size equals :meth:`~asrkit.models.encoder.BaseEncoder.forward_chunk_by_chunk`.
Caches of :meth:`~asrkit.models.encoder.BaseEncoder.forward_chunk`: the attention's as the
conformer's, and ``cnn_cache [num_blocks, 1, cgmlp_linear_units / 2, cgmlp_conv_kernel − 1]``
(the gate half's inputs of the frames before the chunk; ``[num_blocks, 1, cgmlp_linear_units / 2, 0]``
for a centred convolution).  ``learned_ave`` pools over the whole utterance and does not
stream (WeNet's ``forward_chunk`` fails on it too): its ``forward_chunk`` raises.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from asrkit.models.attention import MultiHeadedAttention
from asrkit.models.encoder import BaseEncoder
from asrkit.models.layers import Dropout, conv_padding
from asrkit.models.schema import EncoderConf

# gate_activation -> module (WeNet's WENET_ACTIVATION_CLASSES, and identity)
GATE_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "identity": nn.Identity, "hardtanh": nn.Hardtanh, "tanh": nn.Tanh, "relu": nn.ReLU,
    "selu": nn.SELU, "swish": nn.SiLU, "gelu": nn.GELU,
}


def per_block(value, blocks: int, key: str) -> list[float]:
    """A float or one float per block (WeNet's ``Union[float, List[float]]`` keys) as a list
    of ``blocks`` floats; ValueError (one line) for a list of another length."""
    if isinstance(value, (int, float)):
        return [float(value)] * blocks
    if len(value) != blocks:
        raise ValueError(f"encoder_conf.{key}: {len(value)} values for {blocks} blocks (give one, or one per block)")
    return [float(v) for v in value]


class ConvolutionalSpatialGatingUnit(nn.Module):
    """CSGU: split ``x [B, T, U]`` into halves ``(r, g)``; ``r · act(linear?(conv(norm(g))))``
    -> ``[B, T, U/2]``, then dropout.  ``conv`` is depthwise over time, centred (kernel odd)
    or, ``causal``, over the ``kernel − 1`` frames before (zeros before the first)."""

    def __init__(self, size: int, kernel_size: int, dropout_rate: float, use_linear_after_conv: bool,
                 gate_activation: str, causal: bool):
        super().__init__()
        channels = size // 2
        self.norm = nn.LayerNorm(channels, eps=1e-5)
        padding, self.lorder = conv_padding(kernel_size, causal, "cgmlp_conv_kernel")
        self.conv = nn.Conv1d(channels, channels, kernel_size, 1, padding, groups=channels)
        self.linear: Optional[nn.Linear] = nn.Linear(channels, channels) if use_linear_after_conv else None
        self.act = GATE_ACTIVATIONS[gate_activation]()
        self.dropout = Dropout(dropout_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, T, U]`` -> ``[B, T, U/2]`` (a causal convolution starts from zeros)."""
        r, g = x.chunk(2, dim=-1)
        g = g.transpose(1, 2)
        if self.lorder > 0:
            g = nn.functional.pad(g, (self.lorder, 0), "constant", 0.0)
        return self.gate(r, g)

    def forward_chunk(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk ``x [N, T, U]`` with ``cache [N, U/2, kernel − 1]`` (the gate inputs of
        the frames before it; an empty tensor: the start, zeros) -> ``(out [N, T, U/2],
        new_cache)`` (``[N, U/2, 0]`` for a centred convolution, which has no cache)."""
        r, g = x.chunk(2, dim=-1)
        g = g.transpose(1, 2)
        if self.lorder == 0:
            return self.gate(r, g), g.new_zeros([g.size(0), g.size(1), 0])
        if cache.numel() == 0:
            g = nn.functional.pad(g, (self.lorder, 0), "constant", 0.0)
        else:
            g = torch.cat([cache, g], dim=2)
        return self.gate(r, g), g[:, :, g.size(2) - self.lorder:]

    def gate(self, r: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``r [B, T, U/2]`` times the gate of ``g [B, U/2, T + padding]`` (channels first,
        already padded on the left when causal)."""
        g = self.norm(g.transpose(1, 2))
        g = self.conv(g.transpose(1, 2)).transpose(1, 2)
        if self.linear is not None:
            g = self.linear(g)
        return self.dropout(r * self.act(g))


class ConvolutionalGatingMLP(nn.Module):
    """cgMLP: ``channel_proj2(CSGU(GELU(channel_proj1(x))))``, ``D -> U -> U/2 -> D``."""

    def __init__(self, size: int, linear_units: int, kernel_size: int, dropout_rate: float,
                 use_linear_after_conv: bool, gate_activation: str, causal: bool):
        super().__init__()
        if linear_units % 2:
            raise ValueError(f"encoder_conf.cgmlp_linear_units must be even (split in two halves), got {linear_units}")
        self.channel_proj1 = nn.Sequential(nn.Linear(size, linear_units), nn.GELU())
        self.csgu = ConvolutionalSpatialGatingUnit(linear_units, kernel_size, dropout_rate,
                                                   use_linear_after_conv, gate_activation, causal)
        self.channel_proj2 = nn.Linear(linear_units // 2, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.channel_proj2(self.csgu(self.channel_proj1(x)))

    def forward_chunk(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`ConvolutionalSpatialGatingUnit.forward_chunk`."""
        y, new_cache = self.csgu.forward_chunk(self.channel_proj1(x), cache)
        return self.channel_proj2(y), new_cache


class BranchformerEncoderLayer(nn.Module):
    """One Branchformer block (see the module docstring)."""

    def __init__(self, size: int, attn: Optional[MultiHeadedAttention], cgmlp: Optional[ConvolutionalGatingMLP],
                 dropout_rate: float, merge_method: str, cgmlp_weight: float = 0.5,
                 attn_branch_drop_rate: float = 0.0):
        super().__init__()
        if attn is None and cgmlp is None:
            raise ValueError("encoder branchformer needs a branch: use_attn or use_cgmlp must be true")
        if merge_method not in ("concat", "learned_ave", "fixed_ave"):
            raise ValueError(f"unknown merge_method {merge_method!r}")
        self.size = size
        self.merge_method = merge_method
        self.cgmlp_weight = cgmlp_weight
        self.attn_branch_drop_rate = attn_branch_drop_rate
        two = attn is not None and cgmlp is not None
        if two and merge_method == "fixed_ave":
            if not 0.0 <= cgmlp_weight <= 1.0:
                raise ValueError(f"encoder_conf.cgmlp_weight must be in [0, 1], got {cgmlp_weight}")
            if cgmlp_weight == 0.0:  # WeNet removes the branch of weight 0
                cgmlp, two = None, False
            elif cgmlp_weight == 1.0:
                attn, two = None, False
        self.attn = attn
        self.cgmlp = cgmlp
        self.norm_mha: Optional[nn.LayerNorm] = nn.LayerNorm(size, eps=1e-5) if attn is not None else None
        self.norm_mlp: Optional[nn.LayerNorm] = nn.LayerNorm(size, eps=1e-5) if cgmlp is not None else None
        self.norm_final = nn.LayerNorm(size, eps=1e-5)
        self.dropout = Dropout(dropout_rate)
        self.pooling_proj1 = nn.Linear(size, 1)
        self.pooling_proj2 = nn.Linear(size, 1)
        self.weight_proj1 = nn.Linear(size, 1)
        self.weight_proj2 = nn.Linear(size, 1)
        self.use_two_branches = two
        if not (two and merge_method == "learned_ave"):  # (never read: module docstring)
            for proj in (self.pooling_proj1, self.pooling_proj2, self.weight_proj1, self.weight_proj2):
                proj.requires_grad_(False)
        if two:
            self.merge_proj: nn.Module = nn.Linear(2 * size if merge_method == "concat" else size, size)
        else:
            self.merge_proj = nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1|T, T]`` allowed keys of the self-attention,
        ``pos_emb`` from the embedding, ``valid [B, 1, T]`` the frames inside the utterances
        (``learned_ave``'s pooling reads it; defaults to ``mask``, then ``[B, 1, T]``).  The
        cgMLP reads every frame, padding included (WeNet's behaviour)."""
        frames = mask if valid is None else valid
        a = x
        if self.attn is not None and self.norm_mha is not None:
            h = self.norm_mha(x)
            a = self.dropout(self.attn(h, h, h, mask, pos_emb))
        c = x
        if self.cgmlp is not None and self.norm_mlp is not None:
            c = self.dropout(self.cgmlp(self.norm_mlp(x)))
        return self.merge(x, a, c, frames)

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk ``x [N, T, D]`` -> ``(out, new_att_cache [N, H, C + T, 2·d_k],
        new_cnn_cache [N, U/2, kernel − 1])`` (see the module docstring; an attention-less
        block returns an empty attention cache, a cgMLP-less one ``[N, D, 0]``)."""
        if self.use_two_branches and self.merge_method == "learned_ave":
            raise ValueError("merge_method learned_ave pools over the whole utterance: it does not stream "
                             "(WeNet's forward_chunk fails on it too)")
        a = x
        new_att = x.new_zeros([x.size(0), 0, 0, 0])
        if self.attn is not None and self.norm_mha is not None:
            h = self.norm_mha(x)
            att, new_att = self.attn.forward_chunk(h, mask, pos_emb, att_cache)
            a = self.dropout(att)
        c = x
        new_cnn = x.new_zeros([x.size(0), x.size(2), 0])
        if self.cgmlp is not None and self.norm_mlp is not None:
            c, new_cnn = self.cgmlp.forward_chunk(self.norm_mlp(x), cnn_cache)
            c = self.dropout(c)
        return self.merge(x, a, c, x.new_ones([x.size(0), 1, x.size(1)], dtype=torch.bool)), new_att, new_cnn

    def merge(self, x: torch.Tensor, a: torch.Tensor, c: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """``norm_final(x + dropout(merge_proj(...)))`` of the branch outputs ``a`` (attention)
        and ``c`` (cgMLP); ``frames [B, 1, T]`` the valid frames (``learned_ave``)."""
        if not self.use_two_branches:
            y = a if self.cgmlp is None else c
        elif self.merge_method == "concat":
            y = torch.cat([a, c], dim=-1)
        elif self.merge_method == "fixed_ave":
            y = (1.0 - self.cgmlp_weight) * a + self.cgmlp_weight * c
        elif self.training and self.attn_branch_drop_rate > 0 and float(torch.rand(1)) < self.attn_branch_drop_rate:
            y = c  # the attention branch dropped: weights (0, 1)
        else:
            w1 = self.weight_proj1(self.pool(self.pooling_proj1, a, frames))  # [B, 1]
            w2 = self.weight_proj2(self.pool(self.pooling_proj2, c, frames))
            w = torch.softmax(torch.cat([w1, w2], dim=-1), dim=-1).unsqueeze(-1).unsqueeze(-1)  # [B, 2, 1, 1]
            y = w[:, 0] * a + w[:, 1] * c
        return self.norm_final(x + self.dropout(self.merge_proj(y)))

    def pool(self, proj: nn.Linear, h: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """Attention pooling of ``h [B, T, D]`` over its valid ``frames [B, 1, T]`` -> ``[B, D]``."""
        score = proj(h).transpose(1, 2) / math.sqrt(self.size)  # [B, 1, T]
        invalid = frames.eq(0)
        score = torch.softmax(score.masked_fill(invalid, -float("inf")), dim=-1).masked_fill(invalid, 0.0)
        return torch.matmul(score, h).squeeze(1)


class BranchformerEncoder(BaseEncoder):
    """WeNet's ``encoder: branchformer``: conv subsampling, ``num_blocks`` (default 12)
    :class:`BranchformerEncoderLayer` blocks, a final LayerNorm.  Defaults: ``rel_pos``
    positions, ``rel_selfattn`` attention; ``linear_units``, ``activation_type``,
    ``normalize_before`` and the conformer's keys are not read (WeNet's encoder has none of
    them: the schema refuses them)."""

    default_pos_enc = "rel_pos"
    default_attention = "rel_selfattn"
    default_num_blocks = 12

    def __init__(self, input_dim: int, conf: EncoderConf):
        blocks = self.blocks(conf)
        self._cgmlp_weight = per_block(conf.cgmlp_weight, blocks, "cgmlp_weight")
        self._attn_drop = per_block(conf.attn_branch_drop_rate, blocks, "attn_branch_drop_rate")
        super().__init__(input_dim, conf)

    def pre_norm(self, conf: EncoderConf) -> bool:
        return True  # WeNet's branchformer always ends with a LayerNorm

    def build_cgmlp(self, conf: EncoderConf) -> ConvolutionalGatingMLP:
        return ConvolutionalGatingMLP(conf.output_size, conf.cgmlp_linear_units, conf.cgmlp_conv_kernel,
                                      conf.dropout_rate, conf.use_linear_after_conv, conf.gate_activation,
                                      conf.causal)

    def build_layer(self, conf: EncoderConf, index: int) -> nn.Module:
        return BranchformerEncoderLayer(
            conf.output_size, self.build_self_attention(conf) if conf.use_attn else None,
            self.build_cgmlp(conf) if conf.use_cgmlp else None, conf.dropout_rate, conf.merge_method,
            self._cgmlp_weight[index], self._attn_drop[index])
