"""The RNN-T loss on the joint's logits, in fp32, in one of two lattice topologies
(``model_conf.rnnt_type``, k2/icefall's names):

* ``regular``: ``torchaudio.functional.rnnt_loss`` -- a frame can emit any number of
  symbols before its blank moves to the next frame (WeNet's and torchaudio's transducer);
* ``modified``: :func:`modified_rnnt_loss` -- every frame emits exactly one output, a blank
  or one symbol, and either moves to the next frame (k2's ``rnnt_type="modified"``, the
  "monotonic" RNN-T of Tripathi et al., 2019).  A model trained so is what a search with
  **one symbol per frame at most** expects -- sherpa-onnx's transducer searches and the
  beam searches here -- where a ``regular`` model that emits several symbols in one frame
  loses all but one of them (docs/export.md).  An utterance with more tokens than encoder
  frames has no such path; its term is 0 (as CTC's ``zero_infinity``).

Memory: the joint's logits are ``[B, T', U+1, V]`` and torchaudio's loss keeps a gradient
of the same size (it computes it in the forward pass), so a batch costs about
``2 · 4 · B · T' · (U+1) · V`` bytes there, plus the joint's hidden ``[B, T', U+1, join_dim]``
activations; :func:`modified_rnnt_loss` about ``3 · 4 · B · T' · (U+1) · V`` (its fp32
log-softmax is kept for the backward, which builds gradients of that size;
``docs/experiments/transducer_joint_memory.md``).
"""
from __future__ import annotations

import torch
import torchaudio

from asrkit.models.losses import IGNORE_ID


try:  # (a torchaudio without it must not stop asrkit from importing: check_rnnt_loss reports it)
    from torchaudio.functional import rnnt_loss as _torchaudio_rnnt_loss
except ImportError:
    _torchaudio_rnnt_loss = None


class RnntLossUnavailable(RuntimeError):
    """The installed torchaudio cannot compute ``torchaudio.functional.rnnt_loss``."""


def check_rnnt_loss() -> None:
    """:class:`RnntLossUnavailable` (one line, naming the torchaudio version) unless
    ``torchaudio.functional.rnnt_loss`` exists and runs (its compiled kernel can be missing
    from a build that still has the Python function)."""
    problem = "it has no torchaudio.functional.rnnt_loss"
    if _torchaudio_rnnt_loss is not None:
        try:
            _torchaudio_rnnt_loss(torch.zeros(1, 1, 2, 2), torch.ones(1, 1, dtype=torch.int32),
                                  torch.ones(1, dtype=torch.int32), torch.ones(1, dtype=torch.int32), blank=0)
            return
        except Exception as e:  # (RuntimeError or OSError from a missing or mismatched extension)
            problem = f"its rnnt_loss fails: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
    raise RnntLossUnavailable(f"model: transducer needs torchaudio.functional.rnnt_loss, but the installed "
                              f"torchaudio {torchaudio.__version__} cannot compute it ({problem})")


def add_blank(target: torch.Tensor, blank: int) -> torch.Tensor:
    """The predictor's input for ``target [B, L]`` (padded with −1): ``[B, L+1]`` =
    ``<blank>`` followed by the tokens, padding replaced by ``<blank>`` (WeNet's
    ``add_blank``: the predictor starts from ``<blank>``)."""
    column = torch.full((target.size(0), 1), blank, dtype=target.dtype, device=target.device)
    return torch.cat([column, target.masked_fill(target == IGNORE_ID, blank)], dim=1)


RNNT_TYPES = ("regular", "modified")
_IMPOSSIBLE = -1.0e30  # a finite "log 0": -inf would give NaN gradients through logaddexp


def modified_rnnt_loss(logits: torch.Tensor, target: torch.Tensor, logit_lengths: torch.Tensor,
                       target_lengths: torch.Tensor, blank: int) -> torch.Tensor:
    """Per-utterance negative log-likelihood ``[B]`` (fp32) of ``target [B, U]`` (padded with
    −1) in the modified (one output per frame) topology, from raw joint logits ``[B, T, U+1,
    V]`` (log-softmax over V inside), ``logit_lengths [B]`` frames, ``target_lengths [B]``.

    ``α(0, 0) = 0``; ``α(t+1, u) = logaddexp(α(t, u) + log P(blank | t, u), α(t, u−1) +
    log P(y_u | t, u−1))``; the NLL is ``−α(T_b, U_b)``: the sum over every way of placing the
    ``U_b`` symbols on distinct frames in order, the other frames blank.  0 where ``U_b > T_b``."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        log_probs = logits.float().log_softmax(dim=-1)
        batch, frames, positions, _ = log_probs.shape
        blank_lp = log_probs[..., blank]                                        # [B, T, U+1]
        labels = target.masked_fill(target == IGNORE_ID, 0).long()
        emit_lp = log_probs[:, :, :-1].gather(3, labels.view(batch, 1, -1, 1).expand(-1, frames, -1, 1))[..., 0]
        alpha = torch.full((batch, positions), _IMPOSSIBLE, device=logits.device)
        alpha[:, 0] = 0.0
        impossible = alpha.new_full((batch, 1), _IMPOSSIBLE)
        for t in range(frames):
            stay = alpha + blank_lp[:, t]
            move = torch.cat([impossible, alpha[:, :-1] + emit_lp[:, t]], dim=1)
            step = torch.logaddexp(stay, move)
            alpha = torch.where((t < logit_lengths).view(-1, 1), step, alpha)  # (frames past T_b: unchanged)
        nll = -alpha.gather(1, target_lengths.long().view(-1, 1))[:, 0]
        feasible = target_lengths <= logit_lengths
        return torch.where(feasible, nll, torch.zeros_like(nll))


def rnnt_loss(logits: torch.Tensor, target: torch.Tensor, logit_lengths: torch.Tensor,
              target_lengths: torch.Tensor, blank: int, rnnt_type: str = "regular") -> torch.Tensor:
    """Per-utterance RNN-T negative log-likelihood ``[B]`` (fp32), from raw joint logits
    ``[B, T, U+1, V]`` (log-softmax applied inside, over V), ``target [B, U]`` padded with
    −1, ``logit_lengths [B]`` (frames, max T) and ``target_lengths [B]`` (max U).

    Computed in fp32 with autocast off, whatever the logits' dtype (torchaudio takes fp32
    or fp16 only, and the lattice's sums of log-probabilities need fp32).  ``rnnt_type``
    ``modified``: :func:`modified_rnnt_loss` instead of torchaudio's."""
    if rnnt_type == "modified":
        return modified_rnnt_loss(logits, target, logit_lengths, target_lengths, blank)
    if _torchaudio_rnnt_loss is None:
        check_rnnt_loss()  # (raises: the one-line reason)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        return _torchaudio_rnnt_loss(logits.float(), target.masked_fill(target == IGNORE_ID, 0).to(torch.int32),
                          logit_lengths.to(torch.int32), target_lengths.to(torch.int32),
                          blank=blank, reduction="none")
