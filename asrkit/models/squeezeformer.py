"""Squeezeformer encoder (Kim et al. 2022), WeNet's ``encoder: squeezeformer``
(``wenet/models/squeezeformer``), with its keys, defaults and parameter names, so that a
WeNet checkpoint loads as it is.

``feats`` -> :class:`~asrkit.models.squeezeformer_reduction.DepthwiseConv2dSubsampling4` (4×,
``encoder_dim`` channels) -> ``preln`` (a LayerNorm) -> ``num_blocks`` (12)
:class:`~asrkit.models.squeezeformer_layers.SqueezeformerEncoderLayer` blocks -> ``final_proj``
(a linear to ``output_size``, only when it is not ``encoder_dim``).  No final LayerNorm.

Time reduction (the U-Net of the paper): before block ``reduce_idx[k]`` the frames go through
the ``time_reduction_layer`` (``ceil(T / 2)`` frames, see
:mod:`asrkit.models.squeezeformer_reduction`), the attention mask and the positional rows
keep every other frame; before block ``recover_idx[k]`` each frame is repeated twice,
projected (``time_recover_layer``) and added to the activations saved at the matching
reduction (WeNet's bookkeeping: a counter into the saved list), cut to their length, and the
padding frames are zeroed.  One reduction layer and one recovery layer serve every index (WeNet
shares them).  The output has the subsampled frame rate again and the lengths of
:meth:`~asrkit.models.squeezeformer_reduction.DepthwiseConv2dSubsampling4.valid_frames`
(WeNet's).  ``reduce_idx: null``: no reduction (``recover_idx`` is then unread, as WeNet).
A reduction without recovery (``recover_idx: null``) is refused: WeNet's encoder then returns
half the frames with the unreduced lengths.

Streaming (``causal: true``, WeNet's ``time_reduction_layer_type: stream``):
:meth:`SqueezeformerEncoder.forward_chunk` is WeNet's, caches included: ``att_cache
[num_blocks, H, C, 2·d_k]`` holds every block's keys and values at the subsampled rate -- a
block at ``2^k`` times fewer frames stores each of its rows ``2^k`` times (and reads every
``2^k``-th) -- and ``cnn_cache [num_blocks, 1, encoder_dim, cnn_module_kernel − 1]`` the causal
convolutions' scaled inputs at each block's own rate.  With the ``stream`` reduction and an
even chunk, chunk by chunk equals the masked forward (``tests/fixtures/wenet/squeezeformer``);
the ``conv1d`` and ``conv2d`` reductions read frames across a chunk's edge, so they do not.
The fixed-size cache of an exported streaming model (one cache shape for every block) is not
implemented: :meth:`forward_chunk` takes no ``att_mask``.
"""
from __future__ import annotations

from typing import List, Optional, Union

import torch
from torch import nn

from asrkit.models.encoder import MultiRateEncoder, cache_keep_from
from asrkit.models.mask import chunk_attention_mask, valid_mask
from asrkit.models.schema import EncoderConf
from asrkit.models.squeezeformer_layers import (SqueezeformerAttention, SqueezeformerConvolution,
                                                SqueezeformerEncoderLayer, SqueezeformerFeedForward)
from asrkit.models.squeezeformer_reduction import TIME_REDUCTIONS, DepthwiseConv2dSubsampling4


def block_indices(value: Optional[Union[int, list]], key: str) -> List[int]:
    """``reduce_idx`` / ``recover_idx`` (an int, a list or null) as an ascending list (WeNet
    asserts the order); ValueError (one line) otherwise."""
    if value is None:
        return []
    indices = [value] if isinstance(value, int) else [int(v) for v in value]
    if indices != sorted(indices):
        raise ValueError(f"encoder_conf.{key}: {value!r} must be an int or an ascending list (WeNet asserts it)")
    return indices


def reduction_plan(conf: EncoderConf, blocks: int) -> tuple[List[int], List[int], List[int]]:
    """``(reduce, recover, factors)``: the block indices, and per block the frame-rate factor
    ``2^(reductions − recoveries up to it)`` (WeNet's ``calculate_downsampling_factor``);
    ValueError (one line) for indices WeNet cannot run or silently ignores."""
    reduce = block_indices(conf.reduce_idx, "reduce_idx")
    recover = block_indices(conf.recover_idx, "recover_idx") if reduce else []
    if reduce and conf.recover_idx is None:
        raise ValueError("encoder_conf.recover_idx: null with reduce_idx: WeNet's squeezeformer then returns half "
                         "the frames with the unreduced lengths (its CTC fails on them); give one recover_idx "
                         "per reduce_idx")
    if len(reduce) != len(recover):
        raise ValueError(f"encoder_conf: reduce_idx {reduce} and recover_idx {recover} need as many indices "
                         f"(WeNet asserts it)")
    if any(not 0 <= i < blocks for i in reduce + recover):
        raise ValueError(f"encoder_conf: reduce_idx {reduce} and recover_idx {recover} must be block indices "
                         f"in [0, {blocks}) (WeNet ignores the others)")
    factors: List[int] = []
    depth = 0
    for i in range(blocks):
        depth += reduce.count(i) - recover.count(i)
        if depth < 0:
            raise ValueError(f"encoder_conf.recover_idx {recover}: block {i} recovers a reduction that has not "
                             f"happened (reduce_idx {reduce})")
        factors.append(2 ** depth)
    return reduce, recover, factors


class SqueezeformerEncoder(MultiRateEncoder):
    """WeNet's ``encoder: squeezeformer`` (module docstring).  Defaults (WeNet's): 12 blocks,
    ``encoder_dim`` 256, ``reduce_idx`` 5, ``recover_idx`` 11, ``conv1d`` reduction, swish,
    post-norm (``normalize_before: false``), ``cnn_module_kernel`` 31, ``attention_dropout_rate``
    0.1, adaptive scales, WeNet's initialisation.  ``pos_enc_layer_type`` must be ``rel_pos``
    (WeNet's other choice, its plain attention, fails inside WeNet's squeezeformer)."""

    wenet_name = "squeezeformer"
    default_num_blocks = 12

    def __init__(self, input_dim: int, conf: EncoderConf):
        nn.Module.__init__(self)  # (BaseEncoder's front end and blocks are not the squeezeformer's)
        if conf.pos_enc_layer_type not in (None, "rel_pos"):
            raise ValueError(f"encoder_conf.pos_enc_layer_type: {conf.pos_enc_layer_type!r}: encoder squeezeformer "
                             f"takes rel_pos only (WeNet's squeezeformer fails with its plain attention)")
        blocks = self.blocks(conf)
        self.reduce_idx, self.recover_idx, self.factors = reduction_plan(conf, blocks)
        # per block (never empty lists, which TorchScript cannot type): reduce / recover before it
        self.reduces = [i in self.reduce_idx for i in range(blocks)]
        self.recovers = [i in self.recover_idx for i in range(blocks)]
        d = conf.encoder_dim
        if d % conf.attention_heads:
            raise ValueError(f"encoder_conf.encoder_dim ({d}) must be divisible by attention_heads "
                             f"({conf.attention_heads})")
        self._output_size = conf.output_size
        self.attention_heads = conf.attention_heads
        self.encoder_dim = d
        self.activation_type: str = conf.activation_type or "swish"
        self.normalize_before: bool = False if conf.normalize_before is None else conf.normalize_before
        self.embed = DepthwiseConv2dSubsampling4(input_dim, d, conf.dw_stride, conf.input_dropout_rate,
                                                 conf.init_weights)
        self.preln = nn.LayerNorm(d)
        self.encoders = nn.ModuleList([self.build_layer(conf, i) for i in range(blocks)])
        self.time_reduction_layer = TIME_REDUCTIONS[conf.time_reduction_layer_type](d)
        self.time_recover_layer = nn.Linear(d, d)
        self.final_proj: Optional[nn.Linear] = nn.Linear(d, conf.output_size) if conf.output_size != d else None

    def build_layer(self, conf: EncoderConf, index: int) -> nn.Module:
        d = conf.encoder_dim
        dropout = 0.1 if conf.attention_dropout_rate is None else conf.attention_dropout_rate
        kernel = 31 if conf.cnn_module_kernel is None else conf.cnn_module_kernel
        act = conf.activation_type or "swish"

        def ffn() -> SqueezeformerFeedForward:
            return SqueezeformerFeedForward(d, d * conf.feed_forward_expansion_factor, conf.feed_forward_dropout_rate,
                                            act, conf.adaptive_scale, conf.init_weights)

        attn = SqueezeformerAttention(conf.attention_heads, d, dropout, conf.do_rel_shift, conf.adaptive_scale,
                                      conf.init_weights)
        ffn1 = ffn()
        conv = SqueezeformerConvolution(d, kernel, act, conf.cnn_norm_type, conf.causal, conf.adaptive_scale,
                                        conf.init_weights)
        return SqueezeformerEncoderLayer(d, attn, ffn1, conv, ffn(), self.normalize_before, conf.dropout)

    def recover(self, x: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
        """``saved + time_recover_layer(x, each frame twice)``, cut to ``saved``'s frames."""
        up = self.time_recover_layer(x.repeat_interleave(2, dim=1))
        return saved + up[:, :saved.size(1)]

    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor, chunk_size: int = 0,
                num_left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`BaseEncoder.forward <asrkit.models.encoder.BaseEncoder.forward>`; the
        lengths are WeNet's (module docstring of :mod:`asrkit.models.squeezeformer_reduction`)."""
        if feats.dim() != 3:
            raise ValueError(f"encoder input must be [B, T, F], got shape {feats.shape}")
        if feats_lengths.device.type == "cpu":
            self.check_input_lengths(feats_lengths)
        x, pos_emb, valid = self.embed(feats, valid_mask(feats_lengths, feats.size(1)).unsqueeze(1))
        lengths = valid.squeeze(1).sum(1)
        mask = chunk_attention_mask(valid, chunk_size, num_left_chunks)
        x = self.preln(x)
        saved: List[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        index = 0
        for i, layer in enumerate(self.encoders):
            if self.reduces[i]:
                saved.append((x, mask, pos_emb, valid))
                x = self.time_reduction_layer(x, valid)
                mask, pos_emb, valid = mask[:, ::2, ::2], pos_emb[:, ::2], valid[:, :, ::2]
                index += 1
            if self.recovers[i]:
                index -= 1
                before, mask, pos_emb, valid = saved[index]
                x = self.recover(x, before).masked_fill(~valid.transpose(1, 2), 0.0)
            x = layer(x, mask, pos_emb, valid)
        if self.final_proj is not None:
            x = self.final_proj(x)
        return x, lengths

    @torch.jit.export
    def forward_chunk(self, xs: torch.Tensor, offset: int, required_cache_size: int,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor,
                      att_mask: Optional[torch.Tensor] = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """WeNet's ``forward_chunk`` (module docstring for the caches; shapes as
        :meth:`BaseEncoder.forward_chunk <asrkit.models.encoder.BaseEncoder.forward_chunk>`,
        ``cnn_cache`` with ``encoder_dim`` channels).  ``att_mask`` must be ``None``."""
        if att_mask is not None:
            raise ValueError("encoder squeezeformer streams with a growing attention cache only (no att_mask: "
                             "its blocks run at different frame rates)")
        if xs.dim() != 3 or xs.size(0) != 1:
            raise ValueError(f"forward_chunk takes one chunk [1, T, F], got shape {xs.shape}")
        x, _, _ = self.embed(xs, torch.ones(1, 1, xs.size(1), dtype=torch.bool, device=xs.device), offset)
        layers_cached = att_cache.size(0)
        cache_frames = att_cache.size(2) if layers_cached > 0 else 0
        keys = cache_frames + x.size(1)
        pos_emb = self.embed.pos_enc.chunk_table(offset, cache_frames, x.size(1)).to(x.dtype)
        keep_from = cache_keep_from(keys, required_cache_size)
        valid = torch.ones(1, 1, x.size(1), dtype=torch.bool, device=x.device)
        none = x.new_zeros([0, 0, 0, 0])
        x = self.preln(x)
        saved: List[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        new_att: List[torch.Tensor] = []
        new_cnn: List[torch.Tensor] = []
        index, rows = 0, 0
        for i, layer in enumerate(self.encoders):
            if self.reduces[i]:
                saved.append((x, pos_emb, valid))
                x = self.time_reduction_layer(x, valid)
                pos_emb, valid = pos_emb[:, ::2], valid[:, :, ::2]
                index += 1
            if self.recovers[i]:
                index -= 1
                before, pos_emb, valid = saved[index]
                x = self.recover(x, before)
            factor = self.factors[i]
            layer_att = (att_cache[i:i + 1, :, ::factor][:, :, :pos_emb.size(1) - x.size(1)]
                         if layers_cached > 0 else none)
            layer_cnn = cnn_cache[i] if cnn_cache.size(0) > 0 else cnn_cache
            x, att, cnn = layer.forward_chunk(x, None, pos_emb, layer_att, layer_cnn)
            att = att[:, :, keep_from // factor:].repeat_interleave(factor, dim=2)
            if i == 0:
                rows = att.size(2)
            new_att.append(att[:, :, :rows])
            new_cnn.append(cnn.unsqueeze(0))
        if self.final_proj is not None:
            x = self.final_proj(x)
        return x, torch.cat(new_att, dim=0), torch.cat(new_cnn, dim=0)
