"""CTC head: a linear projection to the vocabulary; the loss is computed in fp32.

Host lengths (GPU training): torch's CUDA CTC reads the utterance and target lengths on
the host.  Given as CUDA tensors, ``F.ctc_loss`` copies them to the host -- a host sync
each, in the forward and again in the backward (the GPU check counted 10 syncs a step
in CTC).  The executor knows the lengths on the host already (the batch's CPU tensors):
inside :func:`host_lengths` it hands them over, the model derives the encoder's output
lengths from them (``BaseEncoder.host_output_lengths``, the same integer arithmetic) and
:meth:`CTC.loss` passes CPU lengths to ``F.ctc_loss``.  The values are the same, so the
loss is the same; on a CPU nothing changes (the executor sets no host lengths there).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

_HOST_LENGTHS: contextvars.ContextVar = contextvars.ContextVar("asrkit_ctc_host_lengths", default=None)


@contextlib.contextmanager
def host_lengths(feats_lengths: torch.Tensor, target_lengths: torch.Tensor) -> Iterator[None]:
    """Within: the micro-batch's ``feats_lengths`` and ``target_lengths`` on the host (CPU
    tensors), for :func:`ctc_host_lengths`."""
    token = _HOST_LENGTHS.set((feats_lengths, target_lengths))
    try:
        yield
    finally:
        _HOST_LENGTHS.reset(token)


def ctc_host_lengths(encoder: nn.Module, enc_lengths: torch.Tensor, target_lengths: torch.Tensor
                     ) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """``(encoder output lengths, target lengths)`` on the host for a batch whose lengths are
    on a device, inside :func:`host_lengths`; None elsewhere, on a CPU, for an encoder that
    cannot derive its output lengths on the host, or when the sizes do not match the batch."""
    given = _HOST_LENGTHS.get()
    if given is None or enc_lengths.device.type == "cpu":
        return None
    feats, targets = given
    derive = getattr(encoder, "host_output_lengths", None)
    if derive is None or feats.shape != enc_lengths.shape or targets.shape != target_lengths.shape:
        return None
    enc = derive(feats)
    return None if enc is None else (enc, targets)


# On the CPU, a vocabulary at least this large with at most half of it in the batch's
# targets takes the label-subset path (LabelSubsetLogProbs); the full path elsewhere.
SUBSET_MIN_VOCAB = 1024


class LabelSubsetLogProbs(torch.autograd.Function):
    """``(logits [..., V], labels [K] sorted) -> [..., K + 1]``: the log-softmax of ``logits``
    at ``labels``, then a last column of zeros (log 1).

    For CTC over the ``K`` labels (the blank and the targets, renumbered by their place in
    ``labels``): the loss only reads those columns, so it equals the full vocabulary's.  The
    gradient is exact too.  torch's ``ctc_loss`` gives the gradient with respect to its input
    as ``gr * (exp(lp) - occupancy)``, with ``gr`` the frame's upstream gradient (0 beyond the
    utterance's length and for a loss ``zero_infinity`` zeroed).  So the zero column, never a
    target, receives exactly ``gr``, and :meth:`backward` returns the full-vocabulary
    gradient: ``gr * softmax(logits)`` everywhere, the given gradient at ``labels``.  This
    is one pass over ``[..., V]`` forward (``logsumexp``) and one backward."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        ctx.save_for_backward(logits, lse, labels)
        return torch.cat([logits.index_select(-1, labels) - lse, torch.zeros_like(lse)], dim=-1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, lse, labels = ctx.saved_tensors
        full = torch.sub(logits, lse).exp_().mul_(grad[..., -1:])  # (in place: [..., V] is large)
        full.index_copy_(-1, labels, grad[..., :-1])
        return full, None


def batch_labels(target: torch.Tensor, blank_id: int) -> torch.Tensor:
    """The sorted distinct ids of ``target``'s tokens (−1 padding left out) and ``blank_id``."""
    return torch.unique(torch.cat([target[target >= 0].flatten(), target.new_tensor([blank_id])]))


class CTC(nn.Module):
    """``forward(enc_out [B, T, D]) -> log-probabilities [B, T, V]`` in fp32."""
    # the layers sized by the vocabulary (asrkit.finetune.vocabulary re-initialises them)
    VOCABULARY_LAYERS = ("ctc_lo",)

    def __init__(self, vocab_size: int, encoder_output_size: int, blank_id: int = 0):
        super().__init__()
        self.blank_id = blank_id
        self.ctc_lo = nn.Linear(encoder_output_size, vocab_size)

    def forward(self, enc_out: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.ctc_lo(enc_out).float(), dim=-1)

    def loss(self, enc_out: torch.Tensor, enc_lengths: torch.Tensor, target: torch.Tensor,
             target_lengths: torch.Tensor, host: Optional[tuple[torch.Tensor, torch.Tensor]] = None
             ) -> torch.Tensor:
        """Per-utterance negative log-likelihood ``[B]`` (fp32, also under autocast; float64
        for a float64 model).
        ``target [B, L]`` is padded with −1 beyond ``target_lengths``.  An utterance whose
        target cannot be aligned (too long for its frames) gets loss 0
        (``zero_infinity``); the data filter is expected to drop such utterances.  ``host``:
        the same ``(enc_lengths, target_lengths)`` as CPU tensors (:func:`ctc_host_lengths`),
        used instead, so that torch's CUDA CTC need not copy them to the host.  A large
        vocabulary on the CPU is computed over the batch's labels (:class:`LabelSubsetLogProbs`,
        the same loss and gradient)."""
        if host is not None:
            enc_lengths, target_lengths = host
        logits = self.ctc_lo(enc_out)
        vocab = logits.size(-1)
        with torch.autocast(device_type=enc_out.device.type, enabled=False):
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (float64 stays)
            blank = self.blank_id
            labels = batch_labels(target, blank) if logits.device.type == "cpu" and vocab >= SUBSET_MIN_VOCAB else None
            target = target.clamp(min=0)
            if labels is not None and 2 * labels.numel() <= vocab:
                log_probs = LabelSubsetLogProbs.apply(logits, labels)
                # (padding, beyond target_lengths, is never read: any index will do)
                target = torch.searchsorted(labels, target).clamp(max=labels.numel() - 1)
                blank = int(torch.searchsorted(labels, target.new_tensor(blank)))
            else:
                log_probs = torch.log_softmax(logits, dim=-1)
            return F.ctc_loss(log_probs.transpose(0, 1), target, enc_lengths, target_lengths,
                              blank=blank, reduction="none", zero_infinity=True)
