"""The asset files the installed ``openai-whisper`` package ships (its mel filters and tiktoken
vocabularies), found without importing the package (which imports numba and more)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional


def whisper_asset(name: str) -> Optional[Path]:
    """``whisper/assets/<name>`` of the installed package; None when it is not installed."""
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "assets" / name
