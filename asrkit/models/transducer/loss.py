"""The RNN-T loss: ``torchaudio.functional.rnnt_loss`` on the joint's logits, in fp32.

Memory: the joint's logits are ``[B, T', U+1, V]`` and torchaudio's loss keeps a gradient
of the same size (it computes it in the forward pass), so a batch costs about
``2 · 4 · B · T' · (U+1) · V`` bytes there, plus the joint's hidden ``[B, T', U+1, join_dim]``
activations (``docs/experiments/transducer_joint_memory.md``).
"""
from __future__ import annotations

import torch

from asrkit.models.losses import IGNORE_ID


class RnntLossUnavailable(RuntimeError):
    """The installed torchaudio has no ``torchaudio.functional.rnnt_loss``."""


def check_rnnt_loss() -> None:
    """:class:`RnntLossUnavailable` (one line, naming the torchaudio version) unless
    ``torchaudio.functional.rnnt_loss`` can be imported and run."""
    try:
        import torchaudio
    except Exception as e:  # (ImportError, or a torchaudio built for another torch: OSError)
        raise RnntLossUnavailable(f"model: transducer needs torchaudio.functional.rnnt_loss, but torchaudio "
                                  f"does not import ({type(e).__name__}: {e})") from None
    version = getattr(torchaudio, "__version__", "?")
    try:
        from torchaudio.functional import rnnt_loss
        logits = torch.zeros(1, 1, 2, 2)
        rnnt_loss(logits, torch.ones(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32),
                  torch.ones(1, dtype=torch.int32), blank=0)
    except Exception as e:  # (ImportError; RuntimeError when its compiled extension is missing)
        raise RnntLossUnavailable(f"model: transducer needs torchaudio.functional.rnnt_loss, which torchaudio "
                                  f"{version} lacks ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                                  ) from None


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
    with torch.autocast(device_type=logits.device.type, enabled=False):
        from torchaudio.functional import rnnt_loss as _rnnt_loss
        return _rnnt_loss(logits.float(), target.masked_fill(target == IGNORE_ID, 0).to(torch.int32),
                          logit_lengths.to(torch.int32), target_lengths.to(torch.int32),
                          blank=blank, reduction="none")
