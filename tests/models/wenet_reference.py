"""WeNet's two tiny trained models (``tests/fixtures/wenet/{offline,u2pp}``; see
``/work/shared/wenet_reference/README.md`` for how they and ``reference*.pt`` were made),
loaded as asrkit models, and the check that a model decodes as WeNet's reference did.

The U2++ model's ``encoder_out`` reference for two of the wavs is not full context:
WeNet's ``encoder(feats, lens)`` with its default ``decoding_chunk_size=0`` draws a random
chunk size for a dynamic-chunk model even in eval mode (``add_optional_chunk_mask``), and
it drew 7 and 11 (all left chunks) there: :data:`ENCODER_REF_CHUNK` holds the chunk size
each wav's reference was computed with.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from asrkit.config import load_config
from asrkit.decode.options import DecodingOptions
from asrkit.decode.shared import SharedOutputs
from asrkit.decode.searcher import Searcher
from asrkit.checkpoint.load import load_checkpoint
from asrkit.models import build_model
from asrkit.checkpoint.weights import load_weights
from asrkit.text.units import read_units
from asrkit.text.vocabulary import Vocabulary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wenet"
MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")
# the chunk size (encoder frames, all left chunks; 0 = full context) each wav's encoder_out
# reference was computed with: see the module docstring
ENCODER_REF_CHUNK = {"offline": [0, 0, 0], "u2pp": [0, 7, 11]}


def load_wenet_model(name: str):
    """The WeNet model of fixture folder ``name`` (its train.yaml as WeNet saved it;
    relative paths in it resolve from that folder, as in a WeNet experiment)."""
    return load_wenet_folder(FIXTURES / name)


def load_wenet_folder(folder: Path, config: str = "train.yaml", overrides: tuple[str, ...] = (),
                      checkpoint: str = "epoch_5.pt"):
    """The model of a WeNet experiment ``folder``: ``config`` (with ``overrides``; relative
    paths resolve from the folder) and ``checkpoint``, in eval mode."""
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        cfg = load_config(config, overrides)
        vocabulary = Vocabulary.from_symbols(read_units(cfg.tokenizer_conf.symbol_table_path))
        model = build_model(cfg, cfg.input_dim, vocabulary, load_cmvn_stats=False)
        load_weights(model, load_checkpoint(checkpoint), checkpoint)
    finally:
        os.chdir(cwd)
    return model.eval()


def assert_four_modes_match(model, enc: torch.Tensor, lengths: torch.Tensor, want: dict,
                            reverse_weight: float, wav: str, tol: float = 1e-3) -> None:
    """WeNet's tokens (and scores, to ``tol``, where WeNet reports one) in all four modes,
    decoding ``enc`` as WeNet's reference did (beam 4, ctc_weight 0.3, no blank skip, length
    and blank penalties 0)."""
    searcher = Searcher.of_model(model)
    options = DecodingOptions(beam_size=4, ctc_weight=0.3, reverse_weight=reverse_weight, blank_skip_threshold=1.0,
                              length_penalty=0.0, blank_penalty=0.0)
    shared = SharedOutputs.from_options(searcher, enc, lengths, options)
    assert searcher.ctc_greedy(shared.log_probs(), lengths)[0] == want["ctc_greedy_search"]["tokens"], wav
    nbest, ctc_scores = shared.nbest()
    assert nbest[0][0] == want["ctc_prefix_beam_search"]["tokens"], wav
    assert ctc_scores[0][0] == pytest.approx(want["ctc_prefix_beam_search"]["score"], abs=tol), wav
    hyps, _ = searcher.attention_beam(enc, lengths, 4, length_penalty=0.0)
    assert hyps[0] == want["attention"]["tokens"], wav
    hyps, totals = searcher.attention_rescoring(enc, lengths, nbest, ctc_scores, 0.3, reverse_weight)
    assert hyps[0] == want["attention_rescoring"]["tokens"], wav
    assert totals[0] == pytest.approx(want["attention_rescoring"]["score"], abs=tol), wav
