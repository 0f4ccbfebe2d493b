"""Random-weight files of OpenAI's Whisper layout for the tests (no pretrained weights can
be downloaded here): ``{"dims": ..., "model_state_dict": ...}``, fp16 as OpenAI's files are."""
from __future__ import annotations

from pathlib import Path

import torch

# a tiny model of OpenAI's layout (1 layer each side, width 64); tiny's vocabulary
DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=1,
            n_vocab=51865, n_text_ctx=448, n_text_state=64, n_text_head=2, n_text_layer=1)


def random_openai_state(dims: dict, seed: int = 0) -> dict:
    """openai-whisper's names and shapes for ``dims``, in its ``state_dict()`` order, each
    tensor ``(0.2 * torch.randn(shape, generator)).half()`` from one CPU generator seeded with
    ``seed`` (random values everywhere: LayerNorms and positional tables too)."""
    import whisper  # (deferred: openai-whisper is optional, the callers skip without it)

    names = whisper.model.Whisper(whisper.model.ModelDimensions(**dims)).state_dict()
    generator = torch.Generator().manual_seed(seed)
    return {name: (0.2 * torch.randn(t.shape, generator=generator)).half() for name, t in names.items()}


def random_openai_file(path: Path, seed: int = 0, dims: dict = DIMS) -> Path:
    """``path`` written with ``dims`` and :func:`random_openai_state` of them."""
    torch.save({"dims": dict(dims), "model_state_dict": random_openai_state(dims, seed)}, path)
    return path
