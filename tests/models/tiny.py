"""Tiny model configs for tests (2 blocks, dim 32)."""
from __future__ import annotations

import copy

import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.models import build_model
from asrkit.text.vocabulary import Vocabulary

TINY = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 32, "attention_heads": 4, "linear_units": 64, "num_blocks": 2,
                     "dropout_rate": 0.0, "positional_dropout_rate": 0.0, "attention_dropout_rate": 0.0,
                     "cnn_module_kernel": 5},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 4, "linear_units": 64, "num_blocks": 2, "dropout_rate": 0.0,
                     "positional_dropout_rate": 0.0},
    "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1},
}


def merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def tiny_config(**sections) -> TrainConfig:
    return build(TrainConfig, merge(TINY, sections))


def tiny_model(input_dim: int = 20, vocab_size: int = 12, seed: int = 0, **sections):
    torch.manual_seed(seed)
    return build_model(tiny_config(**sections), input_dim, Vocabulary.of_size(vocab_size))


def random_batch(lengths: list[int], input_dim: int = 20, vocab_size: int = 12,
                 target_lengths: list[int] | None = None, seed: int = 1):
    """Padded random features and targets (ids in 1 .. vocab_size − 2, padded with −1)."""
    g = torch.Generator().manual_seed(seed)
    feats = torch.zeros(len(lengths), max(lengths), input_dim)
    for i, n in enumerate(lengths):
        feats[i, :n] = torch.randn(n, input_dim, generator=g)
    target_lengths = target_lengths or [3] * len(lengths)
    target = torch.full((len(lengths), max(target_lengths)), -1, dtype=torch.long)
    for i, n in enumerate(target_lengths):
        target[i, :n] = torch.randint(1, vocab_size - 1, (n,), generator=g)
    return feats, torch.tensor(lengths), target, torch.tensor(target_lengths)


def tiny_streaming_model(encoder: str, encoder_conf: dict):
    """:func:`tiny_model` in eval mode with ``encoder``/``encoder_conf``, its convolution
    modules' first pointwise bias drawn non-zero: a zero bias hides whether a causal
    convolution's left context (its cache) is right."""
    model = tiny_model(encoder=encoder, encoder_conf=encoder_conf).eval()
    with torch.no_grad():
        for m in model.encoder.modules():
            if hasattr(m, "pointwise_conv1"):
                m.pointwise_conv1.bias.normal_()
    return model
