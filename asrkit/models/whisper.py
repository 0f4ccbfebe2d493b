"""Whisper's encoder-decoder built from asrkit's modules (the ``model: whisper`` shape WeNet
converts OpenAI's checkpoints into).

* encoder: :class:`~asrkit.models.encoder.TransformerEncoder` with ``input_layer: conv1d2``
  (two 1-D convolutions with GELU, 2x), ``pos_enc_layer_type: abs_pos_whisper`` (Whisper's
  sinusoid table added unscaled), ``activation_type: gelu``, ``key_bias: false``,
  pre-norm blocks and a final LayerNorm: Whisper's ``AudioEncoder``;
* decoder: :class:`~asrkit.models.decoder.TransformerDecoder` with ``input_layer:
  embed_learnable_pe`` (token embedding + a learned 448-row table), ``key_bias: false``,
  ``activation_type: gelu``, ``tie_word_embedding: true`` (logits = ``x · embeddingᵀ`` +
  the output layer's bias, zero in a converted OpenAI model): Whisper's ``TextDecoder``.

This module computes; it does not train (no loss: fine-tuning is issue 54's item 3) and
does not read files (:mod:`asrkit.checkpoint.whisper` does).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.decoder import TransformerDecoder
from asrkit.models.encoder import TransformerEncoder
from asrkit.models.schema import DecoderConf, EncoderConf


class WhisperModel(nn.Module):
    """``encoder`` and ``decoder`` of one Whisper model (see the module docstring)."""

    def __init__(self, encoder: TransformerEncoder, decoder: TransformerDecoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def embed_audio(self, feats: torch.Tensor, feats_lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``feats [B, T, n_mels]`` (Whisper's log-mel frames, time first; all ``T`` valid
        when ``feats_lengths`` is None) -> the encoder output ``[B, ceil(T / 2), D]``:
        Whisper's ``embed_audio`` of ``feats.transpose(1, 2)`` (which requires ``T`` =
        3000; here ``T <= 3000``, positions past ``ceil(T / 2)`` not used)."""
        if feats_lengths is None:
            feats_lengths = torch.full([feats.size(0)], feats.size(1), dtype=torch.long, device=feats.device)
        out, _ = self.encoder(feats, feats_lengths)
        return out

    def logits(self, tokens: torch.Tensor, audio_features: torch.Tensor) -> torch.Tensor:
        """Teacher-forced fp32 logits ``[B, L, V]`` of ``tokens [B, L]`` (all valid; causal
        self-attention) attending to every frame of ``audio_features [B, T', D]``:
        Whisper's ``logits(tokens, audio_features)``."""
        b, length = tokens.shape
        lengths = torch.full([b], length, dtype=torch.long, device=tokens.device)
        memory_mask = torch.ones(b, 1, audio_features.size(1), dtype=torch.bool, device=tokens.device)
        return self.decoder.forward_logits(audio_features, memory_mask, tokens, lengths).float()

    @torch.no_grad()
    def greedy(self, audio_features: torch.Tensor, prompt: list[int], steps: int) -> list[list[int]]:
        """``steps`` tokens appended to ``prompt`` by argmax of :meth:`logits` (no token
        suppression, no stopping at end-of-text): per utterance of ``audio_features``, the
        ``steps`` tokens chosen."""
        tokens = torch.tensor([prompt] * audio_features.size(0), dtype=torch.long, device=audio_features.device)
        for _ in range(steps):
            nxt = self.logits(tokens, audio_features)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens[:, len(prompt):].tolist()


def build_whisper(input_dim: int, vocab_size: int, encoder_conf: EncoderConf,
                  decoder_conf: DecoderConf) -> WhisperModel:
    """The :class:`WhisperModel` for ``input_dim`` mel bins, ``vocab_size`` tokens and the
    two sections; ValueError naming a key whose value is not Whisper's shape (WeNet's
    converter writes them: :func:`asrkit.checkpoint.whisper.wenet_config`)."""
    want = {"encoder_conf.input_layer": (encoder_conf.input_layer, "conv1d2"),
            "encoder_conf.pos_enc_layer_type": (encoder_conf.pos_enc_layer_type, "abs_pos_whisper"),
            "decoder_conf.input_layer": (decoder_conf.input_layer, "embed_learnable_pe"),
            "decoder_conf.tie_word_embedding": (decoder_conf.tie_word_embedding, True),
            "encoder_conf.normalize_before": (encoder_conf.normalize_before, True),
            "decoder_conf.normalize_before": (decoder_conf.normalize_before, True)}
    for key, (given, wanted) in want.items():
        if given != wanted:
            raise ValueError(f"{key}: model whisper needs {wanted}, got {given}")
    return WhisperModel(TransformerEncoder(input_dim, encoder_conf),
                        TransformerDecoder(vocab_size, encoder_conf.output_size, decoder_conf))
