"""Efficient Conformer encoder (Burchi & Vielzeuf 2021), WeNet's ``encoder: efficientConformer``
(``wenet/efficient_conformer``), with its keys, defaults and parameter names, so that a WeNet
checkpoint loads as it is.

``feats`` -> the front end (``input_layer``: ``conv2d`` 4×, ``conv2d6``, ``conv2d8``, or
``conv2d2``: one 3×3 stride-2 convolution, WeNet's ``Conv2dSubsampling2``) with WeNet's relative
positions -> ``num_blocks`` (6) conformer blocks
(:class:`~asrkit.models.efficient_conformer_layers.EfficientConformerLayer`) -> a LayerNorm
(pre-norm only).  The blocks of ``stride_layer_idx`` (3) downsample: their convolution module
strides by ``stride`` (2) and their residual is averaged over ``stride`` frames, so every later
block runs at a lower frame rate; the attention mask, the padding mask and the positional rows
keep every ``stride``-th frame after such a block.  With ``stride_kernel`` (true) the convolution
kernel after each stride is the one before it divided by that stride (``15 -> 7`` for 15 and 2).
The blocks of ``group_layer_idx`` (0-3) attend over groups of ``group_size`` (3) frames
(:class:`~asrkit.models.efficient_conformer_layers.GroupedRelPositionMultiHeadedAttention`), the
others with WeNet's relative-position attention.  The keys may sit in ``encoder_conf`` or in its
``efficient_conf`` sub-mapping, as WeNet's recipes write them (:func:`efficient_keys`).

Output lengths (WeNet's: its mask sums): the front end's frames (``conv2d2``: WeNet cuts the
padding mask with ``[:-2:2]``, so an utterance shorter than the batch keeps ``ceil(L / 2)`` frames,
one more than its convolution gives, as in WeNet), then ``ceil(· / s)`` after each stride: a
strided block's last frame averages what is left of its window, padding included, as WeNet's.

Streaming (``causal: true``): :meth:`EfficientConformerEncoder.forward_chunk` is WeNet's, caches
included: ``offset`` counts output frames (the lowest rate; multiplied by the strides' product to
position the chunk), ``att_cache [num_blocks, H, C, 2·d_k]`` holds every block's keys and values
at the front end's rate -- a block after strides of product ``f`` stores each of its rows ``f``
times (and reads every ``f``-th, dropping leading rows where the chunk's frames do not divide
evenly, as WeNet) -- and ``cnn_cache [num_blocks, 1, D, cnn_module_kernel − 1]`` the causal
convolutions' inputs, each block's ``kernel − 1`` last frames zero-padded on the left to the
first kernel's.  A chunk of frames divisible by the strides' product (and, for grouped blocks,
by the groups) streams as the masked forward computes (``tests/fixtures/wenet/efficient_conformer``).
The fixed-size cache of an exported streaming model is not implemented: :meth:`forward_chunk`
takes no ``att_mask`` (the blocks run at different frame rates).
"""
from __future__ import annotations

from typing import Any, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from asrkit.models.attention import RelPositionMultiHeadedAttention
from asrkit.models.efficient_conformer_layers import (EfficientConformerLayer, GroupedRelPositionMultiHeadedAttention,
                                                     StrideConvolutionModule)
from asrkit.models.encoder import MultiRateEncoder, cache_keep_from
from asrkit.models.encoder_schema import EFFICIENT_DEFAULTS
from asrkit.models.mask import chunk_attention_mask, valid_mask
from asrkit.models.schema import EncoderConf


def efficient_keys(conf: EncoderConf) -> dict[str, Any]:
    """The Efficient Conformer's five keys: ``encoder_conf.efficient_conf``'s value, else
    ``encoder_conf``'s, else WeNet's default (the schema refuses a key given in both)."""
    nested = conf.efficient_conf
    values = {}
    for key, default in EFFICIENT_DEFAULTS.items():
        value = getattr(nested, key) if nested is not None else None
        values[key] = value if value is not None else getattr(conf, key)
        if values[key] is None:
            values[key] = default
    return values


def _as_list(value) -> List[int]:
    return [value] if isinstance(value, int) else [int(v) for v in value]


def efficient_plan(conf: EncoderConf, blocks: int) -> tuple[List[int], List[int], List[int]]:
    """``(strides, kernels, groups)``: per block its stride (1: none), its convolution kernel and
    its attention group size (0: WeNet's plain relative attention); ValueError (one line) for
    values WeNet fails on or silently ignores."""
    keys = efficient_keys(conf)
    where = _as_list(keys["stride_layer_idx"])
    sizes = _as_list(keys["stride"])
    grouped = _as_list(keys["group_layer_idx"])
    if len(where) != len(sizes):
        raise ValueError(f"encoder_conf: stride_layer_idx {where} and stride {sizes} need as many entries "
                         f"(WeNet asserts it)")
    if where != sorted(set(where)) or any(not 0 <= i < blocks for i in where):
        raise ValueError(f"encoder_conf.stride_layer_idx: {where} must ascend and name blocks in [0, {blocks}) "
                         f"(WeNet mis-streams or ignores the others)")
    if any(not 0 <= i < blocks for i in grouped):
        raise ValueError(f"encoder_conf.group_layer_idx: {grouped} must name blocks in [0, {blocks}) (WeNet ignores "
                         f"the others)")
    if any(s < 1 for s in sizes):
        raise ValueError(f"encoder_conf.stride: {sizes}: strides must be >= 1")
    if where and not conf.use_cnn_module:
        raise ValueError("encoder_conf.use_cnn_module: false with strided blocks (their convolution module is what "
                         "strides; WeNet then keeps the frames and cuts the masks)")
    kernel = 15 if conf.cnn_module_kernel is None else conf.cnn_module_kernel
    strides, kernels = [], []
    for i in range(blocks):
        kernels.append(kernel)
        strides.append(sizes[where.index(i)] if i in where else 1)
        if strides[-1] > 1 and keys["stride_kernel"]:
            kernel //= strides[-1]
    if conf.use_cnn_module and any(k < 1 or (k % 2 == 0 and not conf.causal) for k in kernels):
        raise ValueError(f"encoder_conf: the blocks' convolution kernels {kernels} (cnn_module_kernel divided by "
                         f"each stride before them, stride_kernel: true) must be odd unless causal, and >= 1 "
                         f"(WeNet asserts it)")
    groups = [keys["group_size"] if i in grouped else 0 for i in range(blocks)]
    return strides, kernels, groups


class EfficientConformerEncoder(MultiRateEncoder):
    """WeNet's ``encoder: efficientConformer`` (module docstring).  Defaults (WeNet's): 6 blocks,
    swish, pre-norm, macaron FFN, ``cnn_module_kernel`` 15, one stride of 2 at block 3, grouped
    attention (3 frames) in blocks 0-3.  ``pos_enc_layer_type`` must be ``rel_pos``.  Post-norm
    (``normalize_before: false``) keeps WeNet's unused ``after_norm``, frozen."""

    wenet_name = "efficientConformer"
    default_activation = "swish"
    default_pos_enc = "rel_pos"
    default_attention = "rel_selfattn"

    def __init__(self, input_dim: int, conf: EncoderConf):
        if conf.pos_enc_layer_type not in (None, "rel_pos"):
            raise ValueError(f"encoder_conf.pos_enc_layer_type: {conf.pos_enc_layer_type!r}: encoder "
                             f"efficientConformer takes rel_pos only")
        self.strides, self.kernels, self.groups = efficient_plan(conf, self.blocks(conf))
        super().__init__(input_dim, conf)
        # per block: the product of the strides before it (WeNet's calculate_downsampling_factor)
        self.factors: List[int] = []
        factor = 1
        for stride in self.strides:
            self.factors.append(factor)
            factor *= stride
        self.total_stride = factor
        self.first_kernel = self.kernels[0] if self.kernels else 1
        self.causal = conf.causal
        self.wenet_mask_cut = conf.input_layer == "conv2d2"
        if self.after_norm is None:  # (WeNet's post-norm encoder has one too, unused: kept frozen to load its weights)
            self.after_norm = nn.LayerNorm(conf.output_size, eps=1e-5).requires_grad_(False)

    def build_layer(self, conf: EncoderConf, index: int) -> nn.Module:
        d = conf.output_size
        dropout = 0.0 if conf.attention_dropout_rate is None else conf.attention_dropout_rate
        attn = (GroupedRelPositionMultiHeadedAttention(conf.attention_heads, d, dropout, self.groups[index])
                if self.groups[index] else RelPositionMultiHeadedAttention(conf.attention_heads, d, dropout))
        conv = (StrideConvolutionModule(d, self.kernels[index], conf.cnn_module_norm, self.activation_type,
                                        conf.causal, self.strides[index]) if conf.use_cnn_module else None)
        macaron = self.build_feed_forward(conf) if conf.macaron_style else None
        return EfficientConformerLayer(d, attn, self.build_feed_forward(conf), macaron, conv, conf.dropout_rate,
                                       self.normalize_before, self.strides[index])

    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor, chunk_size: int = 0,
                num_left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`BaseEncoder.forward <asrkit.models.encoder.BaseEncoder.forward>`: ``chunk_size``
        counts front-end frames (a strided block's mask keeps every ``stride``-th row and column);
        the lengths are WeNet's (module docstring)."""
        if feats.dim() != 3:
            raise ValueError(f"encoder input must be [B, T, F], got shape {feats.shape}")
        if feats_lengths.device.type == "cpu":
            self.check_input_lengths(feats_lengths)
        x, pos_emb, lengths = self.embed(feats, feats_lengths)
        if self.wenet_mask_cut:
            valid = valid_mask(feats_lengths, feats.size(1))[:, :-2:2].unsqueeze(1)
        else:
            valid = valid_mask(lengths, x.size(1)).unsqueeze(1)
        mask = chunk_attention_mask(valid, chunk_size, num_left_chunks)
        for i, layer in enumerate(self.encoders):
            x = layer(x, mask, pos_emb, valid)
            stride = self.strides[i]
            if stride > 1:
                valid, mask, pos_emb = valid[:, :, ::stride], mask[:, ::stride, ::stride], pos_emb[:, ::stride]
        if self.normalize_before and self.after_norm is not None:
            x = self.after_norm(x)
        return x, valid.squeeze(1).sum(1)

    @torch.jit.export
    def forward_chunk(self, xs: torch.Tensor, offset: int, required_cache_size: int,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor,
                      att_mask: Optional[torch.Tensor] = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """WeNet's ``forward_chunk`` (module docstring for ``offset`` and the caches; shapes as
        :meth:`BaseEncoder.forward_chunk <asrkit.models.encoder.BaseEncoder.forward_chunk>`, the
        output at the lowest rate).  ``att_mask`` must be ``None``."""
        if att_mask is not None:
            raise ValueError("encoder efficientConformer streams with a growing attention cache only (no att_mask: "
                             "its blocks run at different frame rates)")
        if xs.dim() != 3 or xs.size(0) != 1:
            raise ValueError(f"forward_chunk takes one chunk [1, T, F], got shape {xs.shape}")
        offset = offset * self.total_stride
        x, _, _ = self.embed(xs, torch.full([1], xs.size(1), dtype=torch.long, device=xs.device), offset)
        cached = att_cache.size(0) > 0
        cache_frames = att_cache.size(2) if cached else 0
        keys = cache_frames + x.size(1)
        pos_emb = self.embed.pos_enc.chunk_table(offset, cache_frames, x.size(1)).to(x.dtype)
        keep_from = cache_keep_from(keys, required_cache_size)
        none = x.new_zeros([0, 0, 0, 0])
        new_att: List[torch.Tensor] = []
        new_cnn: List[torch.Tensor] = []
        att_rows, cnn_frames = 0, 0
        for i, layer in enumerate(self.encoders):
            factor = self.factors[i]
            layer_att = none
            if cached:
                cut = 0  # (WeNet's att_cache_trunc: the cache rows that do not fit the positional rows)
                if x.size(1) + cache_frames / factor > pos_emb.size(1):
                    cut = x.size(1) + cache_frames // factor - pos_emb.size(1) + 1
                layer_att = att_cache[i:i + 1, :, ::factor][:, :, cut:]
            layer_cnn = cnn_cache[i] if cnn_cache.size(0) > 0 else cnn_cache
            x, att, cnn = layer.forward_chunk(x, None, pos_emb, layer_att, layer_cnn)
            if self.strides[i] > 1:
                pos_emb = pos_emb[:, ::self.strides[i]]
            att = att[:, :, keep_from // factor:].repeat_interleave(factor, dim=2)
            cnn = cnn.unsqueeze(0)
            if self.causal:
                cnn = F.pad(cnn, (self.first_kernel - 1 - cnn.size(3), 0))
            if i == 0:
                att_rows, cnn_frames = att.size(2), cnn.size(3)
            new_att.append(att[:, :, -att_rows:])
            new_cnn.append(cnn[:, :, :, cnn.size(3) - cnn_frames:])
        if self.normalize_before and self.after_norm is not None:
            x = self.after_norm(x)
        return x, torch.cat(new_att, dim=0), torch.cat(new_cnn, dim=0)
