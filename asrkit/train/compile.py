"""``compile_blocks: true`` (asrkit's own key; WeNet has none): regional ``torch.compile``.

Each block of the encoder and of the decoder(s) -- the modules of every ``ModuleList``
named ``encoders`` or ``decoders`` -- is compiled in place with ``nn.Module.compile``: the
repeated block is traced once and its code reused by every layer (torch's "regional
compilation" recipe), so the compile's warm-up is a block's, not the whole model's, and
the parameter names, checkpoints and the eager parts (subsampling, CTC, the loss) stay
as they are.  Streaming decoding (``forward_chunk``) does not go through the compiled
``__call__`` and stays eager.  Shapes change from batch to batch: torch recompiles a block
once with dynamic sizes after the first change (its automatic dynamic shapes), and
bounded batch shapes (``batch_type: bucket_frames``) keep that small.

Whether it pays is measured by the GPU check (``bench/gpu_stages/first_epoch.py``, variant
``bf16_compile_blocks``, end to end on a first epoch including the compile).
"""
from __future__ import annotations

import logging
from typing import Optional

import torch
from torch import nn

log = logging.getLogger("asrkit.train")
BLOCK_LISTS = ("encoders", "decoders")


def model_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, block)`` of every encoder and decoder block of ``model``."""
    return [(f"{name}.{i}", block) for name, module in model.named_modules()
            if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] in BLOCK_LISTS
            for i, block in enumerate(module)]


def compile_blocks(model: nn.Module, backend: str = "inductor", dynamic: Optional[bool] = None) -> int:
    """Compile every block of :func:`model_blocks` in place; the number compiled."""
    blocks = model_blocks(model)
    for _, block in blocks:
        block.compile(backend=backend, dynamic=dynamic)
    log.info("compile_blocks: %d encoder/decoder blocks under torch.compile (backend %s, torch %s); "
             "the first batches pay the compile", len(blocks), backend, torch.__version__)
    return len(blocks)
