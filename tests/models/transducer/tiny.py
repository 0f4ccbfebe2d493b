"""A tiny transducer config for tests (the tiny conformer of ``tests/models/tiny.py``, an LSTM
predictor and a joint of 16 units, CTC and a transformer decoder, WeNet's reference weights
0.75 / 0.1 / 0.15)."""
from __future__ import annotations

import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.models import build_model
from asrkit.text.vocabulary import Vocabulary
from tests.models.tiny import TINY, merge

TINY_TRANSDUCER = merge(TINY, {
    "model": "transducer",
    "predictor": "rnn",
    "predictor_conf": {"embed_size": 16, "output_size": 16, "embed_dropout": 0.0, "hidden_size": 16,
                       "num_layers": 1},
    "joint_conf": {"join_dim": 16},
    "model_conf": {"transducer_weight": 0.75, "ctc_weight": 0.1, "attention_weight": 0.15, "lsm_weight": 0.1},
})


def tiny_transducer_config(**sections) -> TrainConfig:
    return build(TrainConfig, merge(TINY_TRANSDUCER, sections))


def tiny_transducer(input_dim: int = 20, vocab_size: int = 12, seed: int = 0, **sections):
    torch.manual_seed(seed)
    return build_model(tiny_transducer_config(**sections), input_dim, Vocabulary.of_size(vocab_size))
