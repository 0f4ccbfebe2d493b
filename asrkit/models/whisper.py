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

:class:`WhisperModel` computes Whisper's functions (the reference test's path);
:class:`WhisperAsrModel` is ``model: whisper``, WeNet's Whisper: the hybrid CTC/attention
model (:class:`~asrkit.models.asr_model.AsrModel`) with these encoder and decoder, whose
decoder input starts with Whisper's prompt (see its docstring).  Neither reads files
(:mod:`asrkit.checkpoint.whisper` does).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.asr_model import AsrModel
from asrkit.models.decoder import TransformerDecoder
from asrkit.models.encoder import TransformerEncoder
from asrkit.models.losses import IGNORE_ID, label_smoothing_loss, token_accuracy_counts
from asrkit.models.mask import valid_mask
from asrkit.models.schema import DecoderConf, EncoderConf
from asrkit.text.vocabulary import Vocabulary
from asrkit.text.whisper import LANGUAGES, WHISPER_TOKENS


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


def check_whisper_shape(encoder_conf: EncoderConf, decoder_conf: DecoderConf) -> None:
    """ValueError naming the first key of the two sections whose value is not Whisper's
    shape (WeNet's converter writes them: :func:`asrkit.checkpoint.whisper.wenet_config`)."""
    want = {"encoder_conf.input_layer": (encoder_conf.input_layer, "conv1d2"),
            "encoder_conf.pos_enc_layer_type": (encoder_conf.pos_enc_layer_type, "abs_pos_whisper"),
            "decoder_conf.input_layer": (decoder_conf.input_layer, "embed_learnable_pe"),
            "decoder_conf.tie_word_embedding": (decoder_conf.tie_word_embedding, True),
            "encoder_conf.normalize_before": (True if encoder_conf.normalize_before is None
                                              else encoder_conf.normalize_before, True),
            "decoder_conf.normalize_before": (decoder_conf.normalize_before, True)}
    for key, (given, wanted) in want.items():
        if given != wanted:
            raise ValueError(f"{key}: model whisper needs {wanted}, got {given}")


def build_whisper(input_dim: int, vocab_size: int, encoder_conf: EncoderConf,
                  decoder_conf: DecoderConf) -> WhisperModel:
    """The :class:`WhisperModel` for ``input_dim`` mel bins, ``vocab_size`` tokens and the
    two sections (:func:`check_whisper_shape` first)."""
    check_whisper_shape(encoder_conf, decoder_conf)
    return WhisperModel(TransformerEncoder(input_dim, encoder_conf),
                        TransformerDecoder(vocab_size, encoder_conf.output_size, decoder_conf))


def special_tokens(vocabulary: Vocabulary, given: Optional[dict[str, int]]) -> dict[str, int]:
    """Every key of :data:`WHISPER_TOKENS` -> its id in ``vocabulary`` (a Whisper tokenizer's),
    ``given`` (``tokenizer_conf.special_tokens``) taking precedence.  ValueError (one line) for
    a given id that is not the vocabulary's id of that token, except ``eot`` given as
    ``sot``'s id: WeNet's converter wrote that before WeNet's #2330 (January 2024; the
    decoder is then taught to end with ``<|startoftranscript|>``), and it is WeNet's
    meaning."""
    missing = [name for name in WHISPER_TOKENS.values() if name not in vocabulary.symbols]
    if missing:
        raise ValueError(f"model: whisper needs Whisper's vocabulary (tokenizer: whisper); it has no {missing[0]}")
    tokens = {key: vocabulary.symbols.index(name) for key, name in WHISPER_TOKENS.items()}
    for key, value in (given or {}).items():
        if value != tokens[key] and not (key == "eot" and value == tokens["sot"]):
            raise ValueError(f"tokenizer_conf.special_tokens.{key} is {value}; the tokenizer's {WHISPER_TOKENS[key]} "
                             f"is id {tokens[key]}")
    return {**tokens, **(given or {})}


class WhisperAsrModel(AsrModel):
    """``model: whisper``: :class:`AsrModel`'s loss (its docstring) with Whisper's decoder
    targets, as WeNet's ``wenet/whisper/whisper.py`` (``add_whisper_tokens``) computes them.

    With the prompt ``P = [sot, <|language|>, <|task|>, no_timestamps]`` (4 ids; the ids of
    ``special_tokens``; the language id is ``sot + 1 + LANGUAGES.index(language)``, the task
    ``transcribe`` or ``translate``), utterance ``y`` (``L`` ids) is taught as

    * decoder input ``P + y`` (padded with ``eot``), ``L + 4`` positions;
    * targets ``P[1:] + y + [eot]``: the language, task and no-timestamps tokens, the text
      and ``eot`` (``special_tokens["eot"]``), ``L + 4`` positions, all in the attention
      loss and in ``acc``;

    so ``num_tokens`` = Σ_u (L_u + 4) (WeNet's token count of the attention targets).  The
    CTC branch sees ``y`` alone, blank ``<|nospeech|>`` (``ctc_conf.ctc_blank_id``).
    Every utterance of a batch has the model's ``language`` and ``task`` (attributes, by
    default ``"en"`` and ``"transcribe"``); WeNet takes them per utterance from the data
    (asrkit's data pipeline does not carry them yet).  As in WeNet, the prompt has the
    language and task tokens for English-only models too (Whisper's own ``*.en`` prompt
    is ``[sot, no_timestamps]``).  ``self.sos`` / ``self.eos`` are ``sot`` / ``eot``.
    """

    PROMPT_LENGTH = 4

    def __init__(self, vocabulary: Vocabulary, encoder: nn.Module, decoder: Optional[nn.Module], ctc, cmvn,
                 tokens: dict[str, int], ctc_weight: float, lsm_weight: float = 0.0,
                 length_normalized_loss: bool = False, language: str = "en", task: str = "transcribe"):
        super().__init__(vocabulary, encoder, decoder, ctc, cmvn, ctc_weight=ctc_weight, lsm_weight=lsm_weight,
                         length_normalized_loss=length_normalized_loss)
        self.special_tokens = dict(tokens)
        self.sos, self.eos = tokens["sot"], tokens["eot"]
        self.language, self.task = language, task

    def decoder_prompt(self) -> list[int]:
        """``[sot, <|language|>, <|task|>, no_timestamps]`` of the model's ``language`` and
        ``task``; ValueError for a language or task Whisper or this vocabulary does not have."""
        if self.language not in LANGUAGES or self.task not in ("transcribe", "translate"):
            raise ValueError(f"Whisper's prompt needs a language of {list(LANGUAGES)} and task transcribe or "
                             f"translate, got {self.language!r}, {self.task!r}")
        t = self.special_tokens
        language = t["sot"] + 1 + LANGUAGES.index(self.language)
        if language >= t["translate"]:
            raise ValueError(f"language {self.language!r} has no token in this vocabulary (its languages end "
                             f"before <|translate|>, id {t['translate']})")
        return [t["sot"], language, t[self.task], t["no_timestamps"]]

    def _counts(self, feats: torch.Tensor, target: torch.Tensor, target_lengths: torch.Tensor) -> dict:
        out = super()._counts(feats, target, target_lengths)
        out["num_tokens"] = (target_lengths + self.PROMPT_LENGTH).sum()
        return out

    def attention_loss(self, enc_out: torch.Tensor, enc_lengths: torch.Tensor, target: torch.Tensor,
                       target_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Σ loss, correct, total)`` of the decoder on the class docstring's inputs and targets."""
        assert self.decoder is not None
        b, eot = target.size(0), self.special_tokens["eot"]
        prompt = torch.tensor(self.decoder_prompt(), dtype=target.dtype, device=target.device).expand(b, -1)
        ys_in = torch.cat([prompt, target.masked_fill(target == IGNORE_ID, eot)], dim=1)
        ys_out = torch.cat([prompt[:, 1:], target, torch.full_like(prompt[:, :1], IGNORE_ID)], dim=1)
        ys_out.scatter_(1, (target_lengths + prompt.size(1) - 1).unsqueeze(1), eot)
        memory_mask = valid_mask(enc_lengths, enc_out.size(1)).unsqueeze(1)
        logits, _ = self.decoder(enc_out, memory_mask, ys_in, target_lengths + prompt.size(1), None)
        correct, total = token_accuracy_counts(logits, ys_out)
        return label_smoothing_loss(logits, ys_out, self.lsm_weight).sum(), correct, total
