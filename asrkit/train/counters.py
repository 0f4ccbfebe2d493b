"""``TrainState``: the counters of a training run that survive a resume (every checkpoint
holds them): the executor advances them at each optimizer step, the trainer at each epoch."""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass
class TrainState:
    """Counters that survive a resume (saved in every checkpoint)."""

    epoch: int = 0              # epoch being trained (0-based)
    step: int = 0               # optimizer steps taken so far
    nonfinite_total: int = 0    # steps skipped for non-finite gradients (faults)
    nonfinite_in_row: int = 0
    scaler_skips: int = 0       # fp16 GradScaler calibration skips (not faults)
    empty_groups: int = 0       # groups with no utterance on any rank (all skipped)
    best_cv_loss: Optional[float] = None
    epochs_without_improvement: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainState":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})
