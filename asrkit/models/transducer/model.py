"""The transducer model (``model: transducer``): WeNet's hybrid RNN-T + CTC + attention
model, as :class:`Transducer`."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.asr_model import AsrModel
from asrkit.models.cmvn import GlobalCMVN
from asrkit.models.ctc import CTC
from asrkit.models.transducer.joint import TransducerJoint
from asrkit.models.transducer.loss import RNNT_TYPES, add_blank, rnnt_loss
from asrkit.models.transducer.predictor import Predictor
from asrkit.text.vocabulary import Vocabulary


class Transducer(AsrModel):
    """Encoder + predictor + joint (RNN-T), with an optional CTC head and attention decoder.

    The CTC head and the decoder, the encoder, CMVN, :meth:`encode` and the attention loss
    are :class:`~asrkit.models.asr_model.AsrModel`'s (one implementation for both models);
    this class adds ``predictor`` (:mod:`asrkit.models.transducer.predictor`), ``joint``
    (:class:`~asrkit.models.transducer.joint.TransducerJoint`) and the RNN-T term.  A head
    whose weight is 0 is left out (``ctc`` / ``decoder`` None), so every parameter takes
    part in the loss.  Special ids from the vocabulary: ``blank_id`` (the predictor's first
    input and the RNN-T blank), ``sos`` / ``eos`` (the decoder's).

    ``forward`` returns a dict of **sums over the batch** (the trainer divides by the
    global count, summed over micro-batches and ranks):

    * ``loss`` = ``transducer_weight · loss_rnnt + ctc_weight · loss_ctc + attention_weight · loss_att``
    * ``loss_rnnt`` = Σ_u RNN-T NLL of utterance u (:func:`~asrkit.models.transducer.loss.rnnt_loss`,
      fp32, in the ``rnnt_type`` topology: ``regular``, WeNet's, or ``modified``); with ``length_normalized_loss`` times ``num_tokens / num_utts``
    * ``loss_ctc``, ``loss_att``, ``acc_correct``, ``acc_total``, ``num_utts`` = B,
      ``num_tokens`` = Σ_u (L_u + 1): as :class:`~asrkit.models.asr_model.AsrModel`'s (None
      for a head the model does not have)

    WeNet's per-batch loss (``wenet/models/transducer/transducer.py``) is
    ``transducer_weight · RNNT + ctc_weight · CTC + (1 − transducer_weight − ctc_weight) · ATT``
    with RNNT = torchaudio's ``reduction='mean'`` (Σ_u / B), CTC = Σ_u / B and ATT = Σ / B, or
    Σ / (the batch's token count, ``<eos>`` included) with ``length_normalized_loss``; the
    three weights sum to 1 (it asserts it), so its attention weight is ``attention_weight``.
    Hence ``loss / num_utts`` is WeNet's ``loss`` for one batch, and each ``loss_<x> /
    num_utts`` its ``loss_<x>`` (``acc_correct / acc_total`` its ``th_accuracy``); with
    ``length_normalized_loss`` divide by ``num_tokens`` instead (the factor above keeps
    RNN-T and CTC per utterance, as WeNet's).  Over several micro-batches or ranks the
    trainer's division gives the utterance- (token-) weighted mean of WeNet's numbers.
    """

    def __init__(self, vocabulary: Vocabulary, encoder: nn.Module, predictor: Predictor, joint: TransducerJoint,
                 decoder: Optional[nn.Module], ctc: Optional[CTC], cmvn: Optional[GlobalCMVN], *,
                 transducer_weight: float = 1.0, ctc_weight: float = 0.0, attention_weight: float = 0.0,
                 lsm_weight: float = 0.0, reverse_weight: float = 0.0, length_normalized_loss: bool = False,
                 rnnt_type: str = "regular"):
        if abs(transducer_weight + ctc_weight + attention_weight - 1.0) > 1e-6:
            raise ValueError(f"transducer_weight + ctc_weight + attention_weight must be 1, got "
                             f"{transducer_weight} + {ctc_weight} + {attention_weight}")
        if transducer_weight <= 0.0:
            raise ValueError("transducer_weight must be > 0 (the predictor and the joint learn only from "
                             "the RNN-T loss)")
        super().__init__(vocabulary, encoder, decoder, ctc, cmvn, ctc_weight, lsm_weight=lsm_weight,
                         reverse_weight=reverse_weight, length_normalized_loss=length_normalized_loss,
                         attention_weight=attention_weight)
        self.predictor = predictor
        self.joint = joint
        self.transducer_weight = transducer_weight
        if rnnt_type not in RNNT_TYPES:
            raise ValueError(f"rnnt_type must be one of {', '.join(RNNT_TYPES)}, got {rnnt_type!r}")
        self.rnnt_type = rnnt_type  # (the searches read it: asrkit.decode.transducer_search)

    def _zero_loss(self, device: torch.device) -> dict:
        out = super()._zero_loss(device)
        return {"loss_rnnt": out["loss"], **out}

    def transducer_loss(self, enc_out: torch.Tensor, enc_lengths: torch.Tensor, target: torch.Tensor,
                        target_lengths: torch.Tensor) -> torch.Tensor:
        """Per-utterance RNN-T NLL ``[B]`` (fp32) of ``target [B, L]`` (padded with −1) given
        ``enc_out [B, T, D]`` with ``enc_lengths``: the predictor reads ``[<blank>] + target``
        (:func:`~asrkit.models.transducer.loss.add_blank`), the joint combines every frame
        with every predictor position (``[B, T, L+1, V]``, the memory bound of training)."""
        # torchaudio requires T = max(enc_lengths) and L = max(target_lengths) exactly
        frames, tokens = int(enc_lengths.max()), int(target_lengths.max())
        target = target[:, :tokens]
        pred_out = self.predictor(add_blank(target, self.blank_id))
        logits = self.joint(enc_out[:, :frames], pred_out)
        return rnnt_loss(logits, target, enc_lengths, target_lengths, self.blank_id, self.rnnt_type)

    @torch.jit.unused
    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor, target: torch.Tensor,
                target_lengths: torch.Tensor, chunk_size: int = 0, num_left_chunks: int = -1) -> dict:
        """Loss dict of batch sums (see the class docstring); ``chunk_size`` and
        ``num_left_chunks`` as in :meth:`AsrModel.forward <asrkit.models.asr_model.AsrModel.forward>`."""
        if feats.size(0) == 0:
            return self._zero_loss(feats.device)
        out = {"loss_rnnt": None, **self._counts(feats, target, target_lengths)}
        enc_out, enc_lengths = self.encode(feats, feats_lengths, chunk_size=chunk_size,
                                           num_left_chunks=num_left_chunks)
        loss_rnnt = self.per_utterance(self.transducer_loss(enc_out, enc_lengths, target, target_lengths).sum(), out)
        out["loss_rnnt"] = loss_rnnt
        loss = self.transducer_weight * loss_rnnt
        others = self.ctc_attention_loss(enc_out, enc_lengths, target, target_lengths, out)
        out["loss"] = loss if others is None else loss + others
        return out
