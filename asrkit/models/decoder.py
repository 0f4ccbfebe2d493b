"""Attention decoders: transformer (left-to-right) and bidirectional (an extra
right-to-left transformer decoder, trained on reversed targets, used by
``attention_rescoring`` through ``reverse_weight``).

Token conventions: the ``<sos>``/``<eos>`` ids are the model's (its
:class:`asrkit.text.Vocabulary`: wherever the units file puts ``<sos/eos>``); decoder inputs
``ys_in`` start with ``<sos>``; padded positions hold any valid id (they are masked).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.attention import MultiHeadedAttention
from asrkit.models.embedding import PositionalEncoding, TablePositionalEncoding
from asrkit.models.layers import Dropout, PositionwiseFeedForward
from asrkit.models.mask import causal_mask, decoder_self_mask
from asrkit.models.schema import DecoderConf


class DecoderLayer(nn.Module):
    """Masked self-attention -> source attention -> feed-forward, each residual."""

    def __init__(self, size: int, self_attn: MultiHeadedAttention, src_attn: MultiHeadedAttention,
                 feed_forward: PositionwiseFeedForward, dropout_rate: float, normalize_before: bool):
        super().__init__()
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.norm1 = nn.LayerNorm(size, eps=1e-5)
        self.norm2 = nn.LayerNorm(size, eps=1e-5)
        self.norm3 = nn.LayerNorm(size, eps=1e-5)
        self.dropout = Dropout(dropout_rate)
        self.normalize_before = normalize_before

    def forward(self, tgt: torch.Tensor, tgt_mask: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor, cache: Optional[torch.Tensor] = None,
                memory_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``tgt [N, L, D]``, ``tgt_mask [N, L, L]``, ``memory [N, T, D]`` (or ``[B, T, D]``
        with ``memory_index [N]`` naming each row's memory), ``memory_mask [N, 1, T]``.
        With ``cache`` (this layer's outputs for the first ``L − 1`` positions) only the
        last position is computed and the result is ``cat(cache, new)``."""
        pre = self.normalize_before
        h = self.norm1(tgt) if pre else tgt
        if cache is None:
            query, residual, q_mask = h, tgt, tgt_mask
        else:
            query, residual, q_mask = h[:, -1:], tgt[:, -1:], tgt_mask[:, -1:]
        x = residual + self.dropout(self.self_attn(query, h, h, q_mask))
        if not pre:
            x = self.norm1(x)
        h = self.norm2(x) if pre else x
        x = x + self.dropout(self.src_attn(h, memory, memory, memory_mask, None, memory_index))
        if not pre:
            x = self.norm2(x)
        h = self.norm3(x) if pre else x
        x = x + self.dropout(self.feed_forward(h))
        if not pre:
            x = self.norm3(x)
        if cache is not None:
            x = torch.cat([cache, x], dim=1)
        return x


# the rows of the learned positional table of input_layer embed_learnable_pe (Whisper's n_text_ctx,
# WeNet's LearnablePositionalEncoding's max_len)
WHISPER_TEXT_POSITIONS = 448


class TransformerDecoder(nn.Module):
    """Embedding + absolute positions (``decoder_conf.input_layer``), ``num_blocks`` decoder
    layers, output projection (its weight the embedding's with ``tie_word_embedding``)."""
    # the layers sized by the vocabulary (asrkit.finetune.vocabulary re-initialises them)
    VOCABULARY_LAYERS = ("embed", "output_layer")

    def __init__(self, vocab_size: int, d_model: int, conf: DecoderConf, num_blocks: Optional[int] = None):
        super().__init__()
        blocks = conf.num_blocks if num_blocks is None else num_blocks
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_enc = (TablePositionalEncoding(d_model, conf.positional_dropout_rate, WHISPER_TEXT_POSITIONS,
                                                learnable=True)
                        if conf.input_layer == "embed_learnable_pe"
                        else PositionalEncoding(d_model, conf.positional_dropout_rate))
        self.decoders = nn.ModuleList([
            DecoderLayer(d_model,
                         MultiHeadedAttention(conf.attention_heads, d_model, conf.self_attention_dropout_rate,
                                              conf.key_bias),
                         MultiHeadedAttention(conf.attention_heads, d_model, conf.src_attention_dropout_rate,
                                              conf.src_key_bias),
                         PositionwiseFeedForward(d_model, conf.linear_units, conf.dropout_rate,
                                                 conf.activation_type),
                         conf.dropout_rate, conf.normalize_before)
            for _ in range(blocks)])
        self.normalize_before = conf.normalize_before
        self.after_norm: Optional[nn.LayerNorm] = nn.LayerNorm(d_model, eps=1e-5) if conf.normalize_before else None
        self.output_layer = nn.Linear(d_model, vocab_size)
        # the most tokens a decoder input may hold (its learned table's rows), -1: no limit
        self.max_tokens = WHISPER_TEXT_POSITIONS if conf.input_layer == "embed_learnable_pe" else -1
        if conf.tie_word_embedding:
            self.output_layer.weight = self.embed.weight

    @property
    def has_reverse(self) -> bool:
        return False

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        if self.after_norm is not None:
            x = self.after_norm(x)
        return self.output_layer(x)

    def forward_logits(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                       ys_in: torch.Tensor, ys_in_lengths: torch.Tensor,
                       memory_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Teacher-forced logits ``[N, L, V]`` for inputs ``ys_in [N, L]`` (valid up to
        ``ys_in_lengths``), attending to ``memory [N, T, D]`` under ``memory_mask [N, 1, T]``
        (or to ``memory[memory_index[n]]`` for row ``n``; see :class:`DecoderLayer`)."""
        tgt_mask = decoder_self_mask(ys_in_lengths, ys_in.size(1))
        x, _ = self.pos_enc(self.embed(ys_in))
        for layer in self.decoders:
            x = layer(x, tgt_mask, memory, memory_mask, None, memory_index)
        return self._final(x)

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys_in: torch.Tensor,
                ys_in_lengths: torch.Tensor, r_ys_in: Optional[torch.Tensor] = None,
                memory_index: Optional[torch.Tensor] = None
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(left-to-right logits, None)``; ``r_ys_in`` is ignored."""
        return self.forward_logits(memory, memory_mask, ys_in, ys_in_lengths, memory_index), None

    def forward_one_step(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys: torch.Tensor,
                         cache: Optional[list[torch.Tensor]] = None,
                         memory_index: Optional[torch.Tensor] = None
                         ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Incremental decoding (``memory_index`` as in :meth:`forward_logits`).  ``ys [N, t]`` is the full prefix (``<sos>`` first);
        ``cache`` holds each layer's outputs for the first ``t − 1`` positions (or
        ``None`` at ``t = 1``).  Returns log-probabilities ``[N, V]`` (fp32) of the next
        token and the cache for positions ``0 .. t − 1``."""
        t = ys.size(1)
        tgt_mask = causal_mask(t, ys.device).unsqueeze(0)
        x, _ = self.pos_enc(self.embed(ys))
        new_cache: list[torch.Tensor] = []
        for i, layer in enumerate(self.decoders):
            layer_cache = None if cache is None else cache[i]
            x = layer(x, tgt_mask, memory, memory_mask, layer_cache, memory_index)
            new_cache.append(x)
        logits = self._final(x[:, -1])
        return torch.log_softmax(logits.float(), dim=-1), new_cache


class BiTransformerDecoder(nn.Module):
    """A left-to-right and a right-to-left :class:`TransformerDecoder` sharing nothing."""

    def __init__(self, vocab_size: int, d_model: int, conf: DecoderConf):
        super().__init__()
        if conf.r_num_blocks < 1:
            raise ValueError("decoder bitransformer needs decoder_conf.r_num_blocks >= 1")
        self.left_decoder = TransformerDecoder(vocab_size, d_model, conf)
        self.right_decoder = TransformerDecoder(vocab_size, d_model, conf, num_blocks=conf.r_num_blocks)
        self.max_tokens = self.left_decoder.max_tokens

    @property
    def has_reverse(self) -> bool:
        return True

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys_in: torch.Tensor,
                ys_in_lengths: torch.Tensor, r_ys_in: Optional[torch.Tensor] = None,
                memory_index: Optional[torch.Tensor] = None
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(left-to-right logits, right-to-left logits or None)``; ``r_ys_in`` is
        ``<sos>`` followed by the reversed tokens, with the same lengths as ``ys_in``."""
        left = self.left_decoder.forward_logits(memory, memory_mask, ys_in, ys_in_lengths, memory_index)
        right: Optional[torch.Tensor] = None
        if r_ys_in is not None:
            right = self.right_decoder.forward_logits(memory, memory_mask, r_ys_in, ys_in_lengths,
                                                      memory_index)
        return left, right

    def forward_one_step(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys: torch.Tensor,
                         cache: Optional[list[torch.Tensor]] = None,
                         memory_index: Optional[torch.Tensor] = None
                         ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Left-to-right incremental step (see :meth:`TransformerDecoder.forward_one_step`)."""
        return self.left_decoder.forward_one_step(memory, memory_mask, ys, cache, memory_index)
