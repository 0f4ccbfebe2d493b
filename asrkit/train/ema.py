"""Weight EMA: an exponential moving average of the model's weights, kept beside training
and decoded like an averaged checkpoint.

``ema_decay`` (train key; 0 or null: off, the default) switches it on.  After every
optimizer step that is applied (not after a skipped one), every floating-point entry of
the model's ``state_dict`` -- parameters and buffers -- moves towards the new weights:

    shadow ← d · shadow + (1 − d) · weight,   d = min(ema_decay, (1 + n) / (10 + n))

where n is the number of updates so far (TensorFlow's ``ExponentialMovingAverage`` with
``num_updates``: early on, while the weights are far from their final values, the shadow
follows them closely instead of remembering the random start).  Integer buffers are copied.

* **fp32**: the shadow is float32 whatever the training dtype (bf16/fp16 autocast keeps
  fp32 weights; the shadow is not cast down when a model holds lower-precision weights).
* **DDP**: the shadow is of the unwrapped module, updated on every rank after the same
  optimizer steps from the same weights, so it is identical on every rank without any
  communication; rank 0 saves it.
* **Checkpoints**: every training checkpoint holds ``{"decay", "updates", "shadow"}`` under
  ``"ema"``; a resume restores it, so a stopped and resumed run ends with the shadow of an
  uninterrupted one.  A resume from a checkpoint without it starts the shadow at the
  resumed weights (logged).
* **Decoding**: ``python -m asrkit.bin.average_model --mode ema`` writes the shadow of the
  newest epoch checkpoint as a model file (``avg_ema.pt`` in the recipes), which
  ``recognize`` and ``export`` load like any average.
"""
from __future__ import annotations

import torch


class WeightEma:
    """The fp32 shadow of ``model``'s state (module docstring), started at its current weights."""

    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema_decay must be in (0, 1), got {decay!r}")
        self.decay = float(decay)
        self.updates = 0
        self.shadow = self._copy(model.state_dict())

    @staticmethod
    def _copy(state: dict) -> dict[str, torch.Tensor]:
        return {k: (v.detach().float().clone() if v.is_floating_point() else v.detach().clone())
                for k, v in state.items()}

    def current_decay(self) -> float:
        """``d`` of the next update."""
        return min(self.decay, (1.0 + self.updates) / (10.0 + self.updates))

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """One step towards ``model``'s weights (call after each applied optimizer step)."""
        weight = 1.0 - self.current_decay()
        for name, value in model.state_dict().items():
            shadow = self.shadow[name]
            if shadow.is_floating_point():
                shadow.lerp_(value.detach().float(), weight)
            else:
                shadow.copy_(value)
        self.updates += 1

    def reset(self, model: torch.nn.Module) -> None:
        """Start again at ``model``'s weights (a resume from a checkpoint without a shadow)."""
        self.shadow = self._copy(model.state_dict())
        self.updates = 0

    def state_dict(self) -> dict:
        return {"decay": self.decay, "updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        missing = self.shadow.keys() - state["shadow"].keys()
        if missing:
            raise KeyError(f"the saved EMA has no {sorted(missing)[0]!r} (another model?)")
        for name, value in state["shadow"].items():
            if name in self.shadow:
                self.shadow[name].copy_(value)
        self.updates = int(state["updates"])


def ema_weights(state: dict, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model state of a saved EMA ``state`` (``checkpoint["ema"]``), each entry in the
    dtype of the same entry of ``like`` (the checkpoint's ``model``)."""
    shadow = state["shadow"]
    return {k: shadow[k].to(like[k].dtype) if k in like else v for k, v in shadow.items()}
