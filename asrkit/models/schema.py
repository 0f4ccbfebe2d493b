"""Top-level config keys owned by `asrkit.models` (merged into `asrkit.config.TrainConfig`)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar


@dataclasses.dataclass
class ModelSections:
    """Keys of this package; filled in by the issue that implements them."""

    UNSUPPORTED: ClassVar[dict[str, tuple]] = {}
