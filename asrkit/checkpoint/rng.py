"""The random-number generators' states a training checkpoint holds (Python, numpy, torch
CPU and CUDA), as tensors and plain types so that a weights-only load reads them."""
from __future__ import annotations

import random

import numpy as np
import torch


def capture_rng_state() -> dict:
    """Python, numpy and torch (CPU and CUDA) RNG states as tensors and plain types."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Set the RNG states :func:`capture_rng_state` took.  The torch states are byte tensors
    that torch accepts only on the CPU; a checkpoint loaded with ``map_location`` on a GPU
    brings them there, so they are moved back first."""
    random.setstate(_as_tuple(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _as_tuple(x):
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x
