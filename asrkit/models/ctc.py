"""CTC head: a linear projection to the vocabulary; the loss is computed in fp32."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

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
             target_lengths: torch.Tensor) -> torch.Tensor:
        """Per-utterance negative log-likelihood ``[B]`` (fp32, also under autocast).
        ``target [B, L]`` is padded with −1 beyond ``target_lengths``.  An utterance whose
        target cannot be aligned (too long for its frames) gets loss 0
        (``zero_infinity``); the data filter is expected to drop such utterances."""
        logits = self.ctc_lo(enc_out)
        with torch.autocast(device_type=enc_out.device.type, enabled=False):
            log_probs = torch.log_softmax(logits.float(), dim=-1).transpose(0, 1)
            return F.ctc_loss(log_probs, target.clamp(min=0), enc_lengths, target_lengths,
                              blank=self.blank_id, reduction="none", zero_infinity=True)
