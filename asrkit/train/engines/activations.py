"""Activation checkpointing per block (WeNet's ``encoder_conf.gradient_checkpointing`` and
``decoder_conf.gradient_checkpointing``), for every training engine.

A checkpointed block keeps only its input from the forward pass; its activations are
recomputed during the backward (torch's non-reentrant ``torch.utils.checkpoint``, through the
composable ``torch.distributed._composable.checkpoint``: hooks on the block, so its parameter
names, the state dict and the checkpoints are those of a model without it, and FSDP's
``fully_shard`` applies on top).  The recomputation replays the block's random draws
(dropout) exactly, so training computes the same numbers with it and without it: it trades one
more forward of each block for the memory of its activations.

It is applied to the training model only (``asrkit.train.build``): recognition and export
build their own model from the same config and never see it.
"""
from __future__ import annotations

from torch import nn

# the module lists whose elements are the blocks of asrkit's encoders and decoders
BLOCK_LISTS = {"encoder": "encoders", "decoder": "decoders"}


def blocks(model: nn.Module) -> dict[str, list[nn.Module]]:
    """The blocks of ``model`` by part: ``{"encoder": [...], "decoder": [...]}`` -- the
    elements of every ``encoders`` list under ``model.encoder`` and every ``decoders`` list
    under ``model.decoder`` (both halves of a bidirectional decoder).  A part the model lacks
    (a CTC-only model's decoder) has none."""
    found: dict[str, list[nn.Module]] = {}
    for part, list_name in BLOCK_LISTS.items():
        root = getattr(model, part, None)
        found[part] = [] if root is None else [
            block for name, sub in root.named_modules()
            if name.rsplit(".", 1)[-1] == list_name and isinstance(sub, nn.ModuleList) for block in sub]
    return found


def checkpoint_activations(model: nn.Module, encoder: bool, decoder: bool) -> int:
    """Checkpoint the activations of every encoder block (``encoder``) and decoder block
    (``decoder``) of ``model``; returns how many blocks."""
    from torch.distributed._composable import checkpoint  # (defers torch.distributed's composable APIs)
    chosen = [b for part, on in (("encoder", encoder), ("decoder", decoder)) if on for b in blocks(model)[part]]
    for block in chosen:
        checkpoint(block)
    return len(chosen)
