"""E-Branchformer encoder (Kim et al. 2022), WeNet's ``encoder: e_branchformer``
(``wenet/models/e_branchformer``), with its parameter names, so that a WeNet checkpoint loads
as it is.

A block is the Branchformer's two branches between the conformer's macaron feed-forwards:

1. ``x + ff_scale · dropout(FFN_macaron(LayerNorm(x)))`` (``norm_ff_macaron``,
   ``feed_forward_macaron``; ``macaron_style``);
2. two branches of that ``x``: ``a = dropout(MHSA(LayerNorm(x)))`` (``norm_mha``, ``attn``) and
   ``c = dropout(cgMLP(LayerNorm(x)))`` (``norm_mlp``, ``cgmlp``: the Branchformer's
   :class:`~asrkit.models.branchformer.ConvolutionalGatingMLP`);
3. the enhanced merge: ``x + dropout(merge_proj(y + dwconv(y)))`` with ``y = [a; c]`` (``2D``
   channels) and ``dwconv`` a depthwise convolution over time of ``merge_conv_kernel``
   (``depthwise_conv_fusion``), centred or, ``causal``, over the ``kernel − 1`` frames before;
4. ``x + ff_scale · dropout(FFN(LayerNorm(x)))`` (``norm_ff``, ``feed_forward``);
5. ``norm_final``.

``ff_scale`` is 0.5 with the macaron FFN, else 1; ``use_ffn: false`` leaves both FFNs (and
their norms) out, whatever ``macaron_style`` says (WeNet's meaning).  The FFNs read
``linear_units`` and ``activation_type`` (default swish).

Like WeNet's, neither convolution masks the padding frames of a batch: a frame near an
utterance's end reads the (non-zero) subsampled padding after it.

Streaming (``causal: true``): :meth:`~asrkit.models.encoder.BaseEncoder.forward_chunk` caches,
as WeNet's, the attention's keys and values and the cgMLP's convolution inputs
(``cnn_cache [num_blocks, 1, cgmlp_linear_units / 2, cgmlp_conv_kernel − 1]``;
``[num_blocks, 1, cgmlp_linear_units / 2, 0]`` without ``causal``).  WeNet keeps no cache for
the merge convolution: in a chunk its first ``merge_conv_kernel − 1`` frames read zeros
where the masked full forward reads the frames of the chunk before.  asrkit computes what
WeNet does, so chunk by chunk equals WeNet's ``forward_chunk_by_chunk`` and not the masked
forward with the same chunk (0.46 apart on the causal fixture of ``tests/fixtures/wenet/e_branchformer``).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.attention import MultiHeadedAttention
from asrkit.models.branchformer import ConvolutionalGatingMLP
from asrkit.models.encoder import BaseEncoder
from asrkit.models.layers import Dropout, PositionwiseFeedForward, conv_padding
from asrkit.models.schema import EncoderConf


class EBranchformerEncoderLayer(nn.Module):
    """One E-Branchformer block (see the module docstring)."""

    def __init__(self, size: int, attn: MultiHeadedAttention, cgmlp: ConvolutionalGatingMLP,
                 feed_forward: Optional[PositionwiseFeedForward],
                 feed_forward_macaron: Optional[PositionwiseFeedForward], dropout_rate: float,
                 merge_conv_kernel: int = 3, causal: bool = False):
        super().__init__()
        if feed_forward_macaron is not None and feed_forward is None:
            raise ValueError("an E-Branchformer block's macaron feed-forward needs its second feed-forward")
        self.size = size
        self.attn = attn
        self.cgmlp = cgmlp
        self.feed_forward = feed_forward
        self.feed_forward_macaron = feed_forward_macaron
        self.ff_scale = 0.5 if feed_forward_macaron is not None else 1.0
        self.norm_ff: Optional[nn.LayerNorm] = nn.LayerNorm(size, eps=1e-5) if feed_forward is not None else None
        self.norm_ff_macaron: Optional[nn.LayerNorm] = (nn.LayerNorm(size, eps=1e-5)
                                                        if feed_forward_macaron is not None else None)
        self.norm_mha = nn.LayerNorm(size, eps=1e-5)
        self.norm_mlp = nn.LayerNorm(size, eps=1e-5)
        self.norm_final = nn.LayerNorm(size, eps=1e-5)
        self.dropout = Dropout(dropout_rate)
        padding, self.lorder = conv_padding(merge_conv_kernel, causal, "merge_conv_kernel")
        self.depthwise_conv_fusion = nn.Conv1d(2 * size, 2 * size, merge_conv_kernel, 1, padding, groups=2 * size)
        self.merge_proj = nn.Linear(2 * size, size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor,
                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [B, T, D]``, ``mask [B, 1|T, T]`` allowed keys of the self-attention,
        ``pos_emb`` from the embedding; ``valid [B, 1, T]`` is unused (the convolutions read
        every frame, padding included: WeNet's behaviour)."""
        x = self.macaron(x)
        h = self.norm_mha(x)
        a = self.dropout(self.attn(h, h, h, mask, pos_emb))
        c = self.dropout(self.cgmlp(self.norm_mlp(x)))
        return self.after_branches(x, a, c)

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk ``x [N, T, D]`` -> ``(out, new_att_cache [N, H, C + T, 2·d_k],
        new_cnn_cache [N, U/2, cgmlp_conv_kernel − 1])`` (``[N, U/2, 0]`` without ``causal``);
        the merge convolution starts from zeros in every chunk (WeNet's: no cache)."""
        x = self.macaron(x)
        h = self.norm_mha(x)
        att, new_att = self.attn.forward_chunk(h, mask, pos_emb, att_cache)
        c, new_cnn = self.cgmlp.forward_chunk(self.norm_mlp(x), cnn_cache)
        return self.after_branches(x, self.dropout(att), self.dropout(c)), new_att, new_cnn

    def macaron(self, x: torch.Tensor) -> torch.Tensor:
        """Step 1: ``x + ff_scale · dropout(FFN_macaron(norm(x)))`` (``x`` without it)."""
        if self.feed_forward_macaron is not None and self.norm_ff_macaron is not None:
            x = x + self.ff_scale * self.dropout(self.feed_forward_macaron(self.norm_ff_macaron(x)))
        return x

    def after_branches(self, x: torch.Tensor, a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Steps 3-5 on the block's residual ``x`` and the branch outputs ``a``, ``c``."""
        x = x + self.dropout(self.merge_proj(self.merge(torch.cat([a, c], dim=-1))))
        if self.feed_forward is not None and self.norm_ff is not None:
            x = x + self.ff_scale * self.dropout(self.feed_forward(self.norm_ff(x)))
        return self.norm_final(x)

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        """``y + dwconv(y)`` for ``y [B, T, 2D]``; a causal convolution reads zeros before
        the first frame of ``y``."""
        z = y.transpose(1, 2)
        if self.lorder > 0:
            z = nn.functional.pad(z, (self.lorder, 0), "constant", 0.0)
        return y + self.depthwise_conv_fusion(z).transpose(1, 2)


class EBranchformerEncoder(BaseEncoder):
    """WeNet's ``encoder: e_branchformer``: conv subsampling, ``num_blocks`` (default 12)
    :class:`EBranchformerEncoderLayer` blocks, a final LayerNorm.  Defaults: ``rel_pos``
    positions, ``rel_selfattn`` attention, swish FFNs.  ``normalize_before``, the conformer's
    convolution-module keys and the Branchformer's merge keys are not read (WeNet's encoder
    has none of them: the schema refuses them)."""

    default_activation = "swish"
    default_pos_enc = "rel_pos"
    default_attention = "rel_selfattn"
    default_num_blocks = 12

    def pre_norm(self, conf: EncoderConf) -> bool:
        return True  # WeNet's e_branchformer is pre-norm and ends with a LayerNorm

    def build_layer(self, conf: EncoderConf, index: int) -> nn.Module:
        attn = self.build_self_attention(conf)
        cgmlp = ConvolutionalGatingMLP(conf.output_size, conf.cgmlp_linear_units, conf.cgmlp_conv_kernel,
                                       conf.dropout_rate, conf.use_linear_after_conv, conf.gate_activation,
                                       conf.causal)
        feed_forward = self.build_feed_forward(conf) if conf.use_ffn else None
        macaron = self.build_feed_forward(conf) if conf.use_ffn and conf.macaron_style else None
        return EBranchformerEncoderLayer(conf.output_size, attn, cgmlp, feed_forward, macaron, conf.dropout_rate,
                                         conf.merge_conv_kernel, conf.causal)
