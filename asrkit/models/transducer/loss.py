"""The RNN-T loss: ``torchaudio.functional.rnnt_loss`` on the joint's logits, in fp32.

Memory: the joint's logits are ``[B, T', U+1, V]`` and torchaudio's loss keeps a gradient
of the same size (it computes it in the forward pass), so a batch costs about
``2 · 4 · B · T' · (U+1) · V`` bytes there, plus the joint's hidden ``[B, T', U+1, join_dim]``
activations (``docs/experiments/transducer_joint_memory.md``).
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


def rnnt_loss(logits: torch.Tensor, target: torch.Tensor, logit_lengths: torch.Tensor,
              target_lengths: torch.Tensor, blank: int) -> torch.Tensor:
    """Per-utterance RNN-T negative log-likelihood ``[B]`` (fp32), from raw joint logits
    ``[B, T, U+1, V]`` (log-softmax applied inside, over V), ``target [B, U]`` padded with
    −1, ``logit_lengths [B]`` (frames, max T) and ``target_lengths [B]`` (max U).

    Computed in fp32 with autocast off, whatever the logits' dtype (torchaudio takes fp32
    or fp16 only, and the lattice's sums of log-probabilities need fp32)."""
    if _torchaudio_rnnt_loss is None:
        check_rnnt_loss()  # (raises: the one-line reason)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        return _torchaudio_rnnt_loss(logits.float(), target.masked_fill(target == IGNORE_ID, 0).to(torch.int32),
                          logit_lengths.to(torch.int32), target_lengths.to(torch.int32),
                          blank=blank, reduction="none")
