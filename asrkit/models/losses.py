"""Attention-branch loss and accuracy, per utterance."""
from __future__ import annotations

import math

import torch

IGNORE_ID = -1


def label_smoothing_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Per-utterance sum over tokens of ``KL(q ‖ softmax(logits))`` ``[N]`` (fp32), where
    ``q`` puts ``1 − smoothing`` on the target and ``smoothing / (V − 1)`` on every other
    token (WeNet's LabelSmoothingLoss).  Positions with target −1 are ignored.
    With ``smoothing = 0`` this is the cross-entropy."""
    vocab = logits.size(-1)
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    valid = target != IGNORE_ID
    safe_target = target.masked_fill(~valid, 0)
    target_lp = log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    confidence = 1.0 - smoothing
    if smoothing > 0.0:
        other = smoothing / (vocab - 1)
        entropy = confidence * math.log(confidence) if confidence > 0 else 0.0
        entropy += smoothing * math.log(other)
        cross = confidence * target_lp + other * (log_probs.sum(-1) - target_lp)
        per_token = entropy - cross
    else:
        per_token = -target_lp
    return (per_token * valid).sum(-1)


def token_accuracy_counts(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(correct, total)`` counts of argmax predictions over non-ignored positions."""
    valid = target != IGNORE_ID
    correct = (logits.argmax(-1) == target) & valid
    return correct.sum(), valid.sum()
