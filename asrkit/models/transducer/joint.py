"""The transducer joint network (WeNet's ``joint: transducer_joint``), with WeNet's parameter
names (``enc_ffn``, ``pred_ffn``, ``post_ffn``, ``ffn_out``)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.transducer.predictor import ACTIVATIONS


class TransducerJoint(nn.Module):
    """``forward(enc_out, pred_out) -> logits [B, T, U, V]``:

        z[b, t, u] = enc_ffn(enc_out[b, t]) + pred_ffn(pred_out[b, u])    (prejoin_linear)
        z          = post_ffn(z)                                           (postjoin_linear)
        logits     = ffn_out(activation(z))

    Raw logits: no log-softmax (``torchaudio.functional.rnnt_loss`` applies its own; a
    search takes ``log_softmax`` over V).  Without ``prejoin_linear`` the two inputs are
    added as they are (their sizes must then equal ``join_dim``).  ``post_ffn`` comes before
    the activation, as in WeNet.  ``joint_mode`` ``add`` is WeNet's only mode.

    ``pre_project=False`` takes inputs already through ``enc_ffn`` / ``pred_ffn`` (a search
    projects each encoder frame and predictor output once, then joins many pairs).  Inputs
    of 3 dimensions are broadcast (``[B, T, D]`` -> ``[B, T, 1, D]``, ``[B, U, D]`` ->
    ``[B, 1, U, D]``); 4-dimensional inputs are added as they are (e.g. ``[N, 1, 1, D]``
    pairs of a beam).
    """
    # the layers sized by the vocabulary (asrkit.finetune.vocabulary re-initialises them)
    VOCABULARY_LAYERS = ("ffn_out",)

    def __init__(self, vocab_size: int, enc_output_size: int, pred_output_size: int, join_dim: int,
                 prejoin_linear: bool = True, postjoin_linear: bool = False, joint_mode: str = "add",
                 activation: str = "tanh"):
        super().__init__()
        if joint_mode != "add":
            raise ValueError(f"joint_mode must be 'add' (WeNet's only mode), got {joint_mode!r}")
        if not prejoin_linear and not postjoin_linear and not enc_output_size == pred_output_size == join_dim:
            raise ValueError(f"without prejoin_linear and postjoin_linear the sizes must be equal, got "
                             f"enc_output_size {enc_output_size}, pred_output_size {pred_output_size}, "
                             f"join_dim {join_dim}")
        self.prejoin_linear = prejoin_linear
        self.enc_ffn: Optional[nn.Linear] = nn.Linear(enc_output_size, join_dim) if prejoin_linear else None
        self.pred_ffn: Optional[nn.Linear] = nn.Linear(pred_output_size, join_dim) if prejoin_linear else None
        self.post_ffn: Optional[nn.Linear] = nn.Linear(join_dim, join_dim) if postjoin_linear else None
        self.activation = ACTIVATIONS[activation]()
        self.ffn_out = nn.Linear(join_dim, vocab_size)

    def project_encoder(self, enc_out: torch.Tensor) -> torch.Tensor:
        """``enc_ffn(enc_out)`` (the input itself without ``prejoin_linear``)."""
        return self.enc_ffn(enc_out) if self.enc_ffn is not None else enc_out

    def project_predictor(self, pred_out: torch.Tensor) -> torch.Tensor:
        """``pred_ffn(pred_out)`` (the input itself without ``prejoin_linear``)."""
        return self.pred_ffn(pred_out) if self.pred_ffn is not None else pred_out

    def forward(self, enc_out: torch.Tensor, pred_out: torch.Tensor, pre_project: bool = True) -> torch.Tensor:
        if pre_project:
            enc_out = self.project_encoder(enc_out)
            pred_out = self.project_predictor(pred_out)
        if enc_out.dim() != 4:
            enc_out = enc_out.unsqueeze(2)
        if pred_out.dim() != 4:
            pred_out = pred_out.unsqueeze(1)
        z = enc_out + pred_out
        if self.post_ffn is not None:
            z = self.post_ffn(z)
        return self.ffn_out(self.activation(z))


# joint: <name> -> class, built with joint_conf's values
JOINTS: dict[str, type[TransducerJoint]] = {"transducer_joint": TransducerJoint}
