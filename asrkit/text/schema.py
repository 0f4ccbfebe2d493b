"""Top-level config keys owned by `asrkit.text` (merged into `asrkit.config.TrainConfig`)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar


@dataclasses.dataclass
class TextSections:
    """Keys of this package; filled in by the issue that implements them."""

    UNSUPPORTED: ClassVar[dict[str, tuple]] = {}
