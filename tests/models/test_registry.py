"""The model seams: registries that a new family joins with one line, and the vocabulary
object that carries the special ids into the model."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from asrkit.config import TrainConfig

from asrkit.schema import ConfigError, build
from asrkit.models import registry
from asrkit.models import build_model
from asrkit.models.encoder import TransformerEncoder
from asrkit.text.vocabulary import Vocabulary
from tests.models.tiny import TINY, merge, random_batch, tiny_config


class _Probe(nn.Module):
    """A stand-in model family: remembers what its builder was given."""

    def __init__(self, input_dim: int, vocabulary: Vocabulary):
        super().__init__()
        self.input_dim, self.vocabulary = input_dim, vocabulary
        self.proj = nn.Linear(input_dim, vocabulary.size)


def test_a_registered_model_builder_is_validated_and_built(monkeypatch):
    monkeypatch.setitem(registry.MODELS, "probe", lambda cfg, input_dim, vocabulary, cmvn: _Probe(input_dim,
                                                                                                  vocabulary))
    cfg = build(TrainConfig, merge(TINY, {"model": "probe"}))
    vocab = Vocabulary.of_size(7)
    model = build_model(cfg, 20, vocab)
    assert isinstance(model, _Probe) and model.input_dim == 20 and model.vocabulary is vocab
    monkeypatch.delitem(registry.MODELS, "probe")
    known = r"model: must be one of \['asr_model', 'asrmodel', 'transducer', 'whisper'\], got 'probe'"
    with pytest.raises(ConfigError, match=known):
        build(TrainConfig, merge(TINY, {"model": "probe"}))
    with pytest.raises(ValueError, match=known):
        build_model(cfg, 20, vocab)  # (the registry checks the name where it builds, too)


def test_a_registered_encoder_is_accepted_by_the_config(monkeypatch):
    class WideTransformer(TransformerEncoder):
        pass

    with pytest.raises(ConfigError, match="encoder: must be one of"):
        tiny_config(encoder="wide_transformer")
    monkeypatch.setitem(registry.ENCODERS, "wide_transformer", WideTransformer)
    model = build_model(tiny_config(encoder="wide_transformer"), 20, Vocabulary.of_size(12))
    assert type(model.encoder) is WideTransformer


def test_unknown_names_get_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean conformer"):
        tiny_config(encoder="conformr")


def test_special_ids_come_from_the_vocabulary():
    """WeNet's layout puts <sos/eos> at id 2: the model's decoder targets use that id."""
    wenet = Vocabulary.from_symbols(["<blank>", "<unk>", "<sos/eos>", *"abcdefghi"])
    assert (wenet.blank_id, wenet.unk_id, wenet.sos_id, wenet.eos_id, wenet.size) == (0, 1, 2, 2, 12)
    torch.manual_seed(0)
    model = build_model(tiny_config(), 20, wenet)
    assert (model.sos, model.eos, model.blank_id, model.vocab_size) == (2, 2, 0, 12)
    feats, lengths, target, target_lengths = random_batch([30, 24], vocab_size=12)
    target = torch.where(target == 2, torch.full_like(target, 5), target)  # no <sos/eos> inside a transcript
    captured = {}
    original = model.decoder.forward

    def spy(memory, memory_mask, ys_in, ys_lengths, r_ys_in=None):
        captured["ys_in"] = ys_in
        return original(memory, memory_mask, ys_in, ys_lengths, r_ys_in)

    model.decoder.forward = spy
    out = model(feats, lengths, target, target_lengths)
    assert torch.isfinite(out["loss"])
    assert captured["ys_in"][:, 0].tolist() == [2, 2]
    asrkit_layout = Vocabulary.of_size(12)
    assert (asrkit_layout.sos_id, asrkit_layout.eos_id) == (11, 11)


def test_build_model_needs_a_vocabulary_not_a_size():
    with pytest.raises(TypeError, match="Vocabulary"):
        build_model(tiny_config(), 20, 12)


@pytest.mark.parametrize("symbols, problem", [
    (["<blank>", "a", "<sos/eos>"], "exactly one <unk>"),
    (["<blank>", "<unk>", "<sos/eos>", "<sos/eos>"], "exactly one <sos/eos>"),
])
def test_vocabulary_refuses_a_table_without_its_special_units(symbols, problem):
    with pytest.raises(ValueError, match=problem):
        Vocabulary.from_symbols(symbols)
