"""Hybrid CTC/attention ASR model."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.cmvn import GlobalCMVN
from asrkit.models.ctc import CTC, ctc_host_lengths
from asrkit.models.losses import IGNORE_ID, label_smoothing_loss, token_accuracy_counts
from asrkit.models.mask import valid_mask
from asrkit.text.vocabulary import Vocabulary


def add_sos_eos(target: torch.Tensor, target_lengths: torch.Tensor, sos: int, eos: Optional[int] = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """From ``target [B, L]`` (padded with −1) build decoder inputs ``ys_in [B, L+1]``
    = ``<sos> y`` (padded with ``<eos>``) and outputs ``ys_out [B, L+1]`` = ``y <eos>``
    (padded with −1).  ``eos`` defaults to ``sos`` (one ``<sos/eos>`` unit)."""
    eos = sos if eos is None else eos
    b = target.size(0)
    column = torch.full((b, 1), sos, dtype=target.dtype, device=target.device)
    ys_in = torch.cat([column, target.masked_fill(target == IGNORE_ID, eos)], dim=1)
    ys_out = torch.cat([target, torch.full_like(column, IGNORE_ID)], dim=1)
    ys_out.scatter_(1, target_lengths.unsqueeze(1), eos)
    return ys_in, ys_out


def reverse_padded(target: torch.Tensor, target_lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first ``target_lengths[b]`` tokens; padding (−1) stays in place."""
    length = target.size(1)
    positions = torch.arange(length, device=target.device).unsqueeze(0)
    source = target_lengths.unsqueeze(1) - 1 - positions
    valid = source >= 0
    gathered = target.gather(1, source.clamp(min=0))
    return torch.where(valid, gathered, torch.full_like(target, IGNORE_ID))


class AsrModel(nn.Module):
    """Encoder with a CTC head and/or an attention decoder.

    Units: the special ids come from the :class:`~asrkit.text.Vocabulary` the model is
    built for (``blank_id``, ``sos``, ``eos``); targets padded with −1.
    The CTC head is left out when ``ctc_weight == 0`` and the decoder when
    ``ctc_weight == 1``, so no parameter is unused in training.

    ``forward`` returns a dict of **sums over the batch** (the trainer divides by the
    global count, summed over micro-batches and ranks):

    * ``loss`` = ``ctc_weight · loss_ctc + (1 − ctc_weight) · loss_att``
    * ``loss_ctc`` = Σ_u CTC NLL of utterance u (``None`` without CTC head); with
      ``length_normalized_loss`` multiplied by ``num_tokens / num_utts`` (see below)
    * ``loss_att`` = Σ_u Σ_tokens label-smoothed KL, over the ``L_u + 1`` predicted
      positions (tokens and ``<eos>``); with a bidirectional decoder
      ``(1 − reverse_weight) · left + reverse_weight · right`` (``None`` without decoder)
    * ``num_utts`` = B, ``num_tokens`` = Σ_u (L_u + 1) (int64 tensors)
    * ``acc_correct``, ``acc_total``: argmax hits / predicted positions of the
      left-to-right decoder (``None`` without decoder)

    The trainer divides by :meth:`normaliser`: ``num_utts``, or ``num_tokens`` with
    ``length_normalized_loss``.  WeNet's per-batch loss is
    ``ctc_weight · CTC / B + (1 − ctc_weight) · ATT / n`` with ``n = B``, or with
    ``length_normalized_loss`` ``n`` = the batch's token count: WeNet averages CTC over
    utterances either way (``wenet/transformer/ctc.py``); only the attention loss becomes
    per token.  Hence the ``num_tokens / num_utts`` factor on ``loss_ctc``: divided by the
    token count it is the per-utterance CTC average, and ``loss / num_tokens`` is WeNet's
    loss (exactly for one micro-batch on one rank; over several, the token-weighted mean of
    theirs).  An empty batch (B = 0) gives zero sums that still depend on every parameter.
    """

    def __init__(self, vocabulary: Vocabulary, encoder: nn.Module, decoder: Optional[nn.Module],
                 ctc: Optional[CTC], cmvn: Optional[GlobalCMVN], ctc_weight: float,
                 lsm_weight: float = 0.0, reverse_weight: float = 0.0,
                 length_normalized_loss: bool = False, attention_weight: Optional[float] = None):
        super().__init__()
        # the weight of the attention loss: 1 − ctc_weight here; a subclass adding a loss
        # term (asrkit.models.transducer) passes its own
        attention_weight = 1.0 - ctc_weight if attention_weight is None else attention_weight
        if ctc is None and ctc_weight > 0.0:
            raise ValueError("ctc_weight > 0 needs a CTC head")
        if decoder is None and attention_weight > 0.0:
            raise ValueError("ctc_weight < 1 needs a decoder" if attention_weight == 1.0 - ctc_weight
                             else "attention_weight > 0 needs a decoder")
        if reverse_weight > 0.0 and (decoder is None or not decoder.has_reverse):
            raise ValueError("reverse_weight > 0 needs decoder bitransformer")
        if ctc is not None and ctc.blank_id != vocabulary.blank_id:
            raise ValueError(f"CTC blank id {ctc.blank_id} != the vocabulary's <blank> id {vocabulary.blank_id}")
        self.vocab_size = vocabulary.size
        self.sos = vocabulary.sos_id
        self.eos = vocabulary.eos_id
        self.blank_id = vocabulary.blank_id
        self.encoder = encoder
        self.decoder = decoder
        self.ctc = ctc
        self.cmvn = cmvn
        self.ctc_weight = ctc_weight
        self.attention_weight = attention_weight
        self.lsm_weight = lsm_weight
        self.reverse_weight = reverse_weight
        self.length_normalized_loss = length_normalized_loss

    def decoder_prompt(self) -> list[int]:
        """The tokens every decoder input starts with, given and not scored: ``[<sos>]``
        (:class:`~asrkit.models.whisper.WhisperAsrModel`: Whisper's prompt)."""
        return [self.sos]

    def normaliser(self, out: dict) -> torch.Tensor:
        """The count ``out['loss']`` is divided by: tokens or utterances."""
        return out["num_tokens"] if self.length_normalized_loss else out["num_utts"]

    def encode(self, feats: torch.Tensor, feats_lengths: torch.Tensor, chunk_size: int = 0,
               num_left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """CMVN (if any) + encoder: ``(enc_out [B, T', D], enc_lengths [B])``.
        ``chunk_size <= 0``: full context; ``> 0``: the chunk-masked forward of a streaming
        model (chunks of ``chunk_size`` encoder frames, ``num_left_chunks`` left chunks,
        all when < 0; see :meth:`BaseEncoder.forward <asrkit.models.encoder.BaseEncoder.forward>`).
        The encoder's streaming methods take features after CMVN: apply ``self.cmvn``."""
        if self.cmvn is not None:
            feats = self.cmvn(feats)
        return self.encoder(feats, feats_lengths, chunk_size, num_left_chunks)

    def ctc_log_probs(self, enc_out: torch.Tensor) -> torch.Tensor:
        if self.ctc is None:
            raise ValueError("this model has no CTC head (ctc_weight was 0)")
        return self.ctc(enc_out)

    def _zero_loss(self, device: torch.device) -> dict:
        zero = sum(p.sum() for p in self.parameters()) * 0.0
        count = torch.zeros((), dtype=torch.long, device=device)
        has_att = self.decoder is not None
        return {"loss": zero, "loss_ctc": zero if self.ctc is not None else None,
                "loss_att": zero if has_att else None, "num_utts": count, "num_tokens": count,
                "acc_correct": count if has_att else None, "acc_total": count if has_att else None}

    def _counts(self, feats: torch.Tensor, target: torch.Tensor, target_lengths: torch.Tensor) -> dict:
        """The start of a loss dict: ``num_utts``, ``num_tokens`` (see the class docstring)
        and the optional entries at None; ValueError for a ``target`` that is not ``[B, L]``."""
        if target.dim() != 2 or target.size(0) != feats.size(0):
            raise ValueError(f"target must be [B, L] with B={feats.size(0)}, got {tuple(target.shape)}")
        return {"num_utts": torch.full((), feats.size(0), dtype=torch.long, device=feats.device),  # (no host copy)
                "num_tokens": (target_lengths + 1).sum(),
                "loss_ctc": None, "loss_att": None, "acc_correct": None, "acc_total": None}

    def per_utterance(self, loss: torch.Tensor, out: dict) -> torch.Tensor:
        """``loss`` (a sum of per-utterance losses) as the trainer is to see it: as it is, or
        with ``length_normalized_loss`` times ``num_tokens / num_utts``, so that divided by
        the token count it is still the per-utterance average (WeNet normalises only the
        attention loss by tokens; see the class docstring)."""
        return loss * (out["num_tokens"] / out["num_utts"]) if self.length_normalized_loss else loss

    def ctc_attention_loss(self, enc_out: torch.Tensor, enc_lengths: torch.Tensor, target: torch.Tensor,
                           target_lengths: torch.Tensor, out: dict) -> Optional[torch.Tensor]:
        """``ctc_weight · loss_ctc + attention_weight · loss_att`` (None when the model has
        neither term), filling ``out``'s ``loss_ctc``, ``loss_att``, ``acc_correct`` and
        ``acc_total`` (the class docstring); a term whose weight is 0 is not computed."""
        loss: Optional[torch.Tensor] = None
        if self.ctc is not None and self.ctc_weight > 0.0:
            host = ctc_host_lengths(self.encoder, enc_lengths, target_lengths)  # (no host sync on a GPU)
            loss_ctc = self.per_utterance(self.ctc.loss(enc_out, enc_lengths, target, target_lengths, host).sum(), out)
            out["loss_ctc"] = loss_ctc
            loss = self.ctc_weight * loss_ctc
        if self.decoder is not None and self.attention_weight > 0.0:
            att, correct, total = self.attention_loss(enc_out, enc_lengths, target, target_lengths)
            out.update(loss_att=att, acc_correct=correct, acc_total=total)
            weighted = self.attention_weight * att
            loss = weighted if loss is None else loss + weighted
        return loss

    def attention_loss(self, enc_out: torch.Tensor, enc_lengths: torch.Tensor, target: torch.Tensor,
                       target_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Σ loss, correct, total)`` of the decoder(s), teacher-forced."""
        assert self.decoder is not None
        ys_in, ys_out = add_sos_eos(target, target_lengths, self.sos, self.eos)
        r_ys_in: Optional[torch.Tensor] = None
        r_ys_out: Optional[torch.Tensor] = None
        if self.reverse_weight > 0.0:
            r_ys_in, r_ys_out = add_sos_eos(reverse_padded(target, target_lengths), target_lengths, self.sos,
                                           self.eos)
        memory_mask = valid_mask(enc_lengths, enc_out.size(1)).unsqueeze(1)
        logits, r_logits = self.decoder(enc_out, memory_mask, ys_in, target_lengths + 1, r_ys_in)
        loss = label_smoothing_loss(logits, ys_out, self.lsm_weight).sum()
        if r_logits is not None and r_ys_out is not None:
            r_loss = label_smoothing_loss(r_logits, r_ys_out, self.lsm_weight).sum()
            loss = (1.0 - self.reverse_weight) * loss + self.reverse_weight * r_loss
        correct, total = token_accuracy_counts(logits, ys_out)
        return loss, correct, total

    @torch.jit.unused
    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor, target: torch.Tensor,
                target_lengths: torch.Tensor, chunk_size: int = 0, num_left_chunks: int = -1) -> dict:
        """Loss dict of batch sums (see the class docstring), the encoder attending within
        chunks of ``chunk_size`` encoder frames and ``num_left_chunks`` chunks before each
        (0 and −1: full context; the chunk choice's meaning and the trainer's draw of it per
        micro-batch: ``asrkit.models.chunks``)."""
        if feats.size(0) == 0:
            return self._zero_loss(feats.device)
        out = self._counts(feats, target, target_lengths)
        enc_out, enc_lengths = self.encode(feats, feats_lengths, chunk_size=chunk_size,
                                           num_left_chunks=num_left_chunks)
        out["loss"] = self.ctc_attention_loss(enc_out, enc_lengths, target, target_lengths, out)
        return out
