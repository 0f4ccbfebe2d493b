"""Encoders: conv2d subsampling + a stack of transformer or conformer blocks.

``forward(feats [B, T, F], feats_lengths [B]) -> (out [B, T', D], out_lengths [B])``.
Frames ``t >= out_lengths[b]`` of ``out`` are padding (their values are unspecified).
The key-padding mask is built once per batch and shared by every block.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.attention import (MultiHeadedAttention, RelPositionMultiHeadedAttention,
                                    XLRelPositionMultiHeadedAttention)
from asrkit.models.embedding import PositionalEncoding, RelPositionalEncoding, XLRelPositionalEncoding
from asrkit.models.encoder_layer import ConformerEncoderLayer, TransformerEncoderLayer
from asrkit.models.layers import ConvolutionModule, PositionwiseFeedForward
from asrkit.models.mask import valid_mask
from asrkit.models.schema import EncoderConf
from asrkit.models.subsampling import INPUT_LAYERS, Conv2dSubsampling


# pos_enc_layer_type -> its encoding module, and the self-attention that reads its output
POSITIONAL_ENCODINGS: dict[str, type[nn.Module]] = {
    "abs_pos": PositionalEncoding,
    "rel_pos": RelPositionalEncoding,        # WeNet's: absolute table rows, no shift
    "rel_pos_xl": XLRelPositionalEncoding,   # Transformer-XL's: 2T-1 distances, shifted
}
POSITIONAL_ATTENTION: dict[str, type[MultiHeadedAttention]] = {
    "rel_pos": RelPositionMultiHeadedAttention,
    "rel_pos_xl": XLRelPositionMultiHeadedAttention,
}


class BaseEncoder(nn.Module):
    """Shared front end, block loop and final LayerNorm (pre-norm only)."""

    # encoder-type defaults for the keys whose WeNet default depends on the encoder
    default_activation = "relu"
    default_pos_enc = "abs_pos"
    default_attention = "selfattn"

    def __init__(self, input_dim: int, conf: EncoderConf):
        super().__init__()
        self._output_size = conf.output_size
        self.activation_type: str = conf.activation_type or self.default_activation
        self.pos_enc_type: str = conf.pos_enc_layer_type or self.default_pos_enc
        self.attention_type: str = conf.selfattention_layer_type or self.default_attention
        if self.attention_type == "rel_selfattn" and self.pos_enc_type not in POSITIONAL_ATTENTION:
            raise ValueError("selfattention_layer_type rel_selfattn needs pos_enc_layer_type rel_pos or rel_pos_xl")
        d = conf.output_size
        pos_enc = POSITIONAL_ENCODINGS[self.pos_enc_type](d, conf.positional_dropout_rate)
        self.embed = Conv2dSubsampling(input_dim, d, INPUT_LAYERS[conf.input_layer], pos_enc)
        self.encoders = nn.ModuleList([self.build_layer(conf) for _ in range(conf.num_blocks)])
        self.normalize_before = conf.normalize_before
        self.after_norm: Optional[nn.LayerNorm] = nn.LayerNorm(d, eps=1e-5) if conf.normalize_before else None

    def build_self_attention(self, conf: EncoderConf) -> MultiHeadedAttention:
        cls = (POSITIONAL_ATTENTION[self.pos_enc_type] if self.attention_type == "rel_selfattn"
               else MultiHeadedAttention)
        return cls(conf.attention_heads, conf.output_size, conf.attention_dropout_rate)

    def build_feed_forward(self, conf: EncoderConf) -> PositionwiseFeedForward:
        return PositionwiseFeedForward(conf.output_size, conf.linear_units, conf.dropout_rate,
                                       self.activation_type)

    def build_layer(self, conf: EncoderConf) -> nn.Module:
        raise NotImplementedError(f"{type(self).__name__} must define build_layer")

    def output_size(self) -> int:
        return self._output_size

    @property
    def subsampling_rate(self) -> int:
        return self.embed.rate

    @property
    def min_input_length(self) -> int:
        """Shortest input (frames) that yields at least one output frame."""
        return self.embed.min_input_length

    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3:
            raise ValueError(f"encoder input must be [B, T, F], got shape {feats.shape}")
        if feats.size(0) > 0 and int(feats_lengths.min()) < self.embed.min_input_length:
            raise ValueError(f"an utterance has {int(feats_lengths.min())} frames; the "
                             f"{self.embed.rate}x subsampling needs at least "
                             f"{self.embed.min_input_length} (filter short utterances)")
        x, pos_emb, lengths = self.embed(feats, feats_lengths)
        mask = valid_mask(lengths, x.size(1)).unsqueeze(1)  # [B, 1, T']
        for layer in self.encoders:
            x = layer(x, mask, pos_emb)
        if self.after_norm is not None:
            x = self.after_norm(x)
        return x, lengths


class TransformerEncoder(BaseEncoder):
    """Transformer encoder (defaults: relu, absolute positions, plain self-attention)."""

    def build_layer(self, conf: EncoderConf) -> nn.Module:
        return TransformerEncoderLayer(conf.output_size, self.build_self_attention(conf),
                                       self.build_feed_forward(conf), conf.dropout_rate,
                                       conf.normalize_before)


class ConformerEncoder(BaseEncoder):
    """Conformer encoder (defaults: swish, relative positions, rel-pos self-attention,
    macaron FFN, conv module)."""

    default_activation = "swish"
    default_pos_enc = "rel_pos"
    default_attention = "rel_selfattn"

    def build_layer(self, conf: EncoderConf) -> nn.Module:
        macaron = self.build_feed_forward(conf) if conf.macaron_style else None
        conv = (ConvolutionModule(conf.output_size, conf.cnn_module_kernel, conf.cnn_module_norm,
                                  self.activation_type, causal=conf.causal)
                if conf.use_cnn_module else None)
        return ConformerEncoderLayer(conf.output_size, self.build_self_attention(conf),
                                     self.build_feed_forward(conf), macaron, conv,
                                     conf.dropout_rate, conf.normalize_before)
