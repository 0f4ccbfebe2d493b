"""WeNet checkpoints as WeNet saves them (``tests/fixtures/wenet/*/epoch_5.pt``): every key
is accounted for -- renamed, or a positional table checked and dropped -- and nothing is
ever loaded with a key missing or left over."""
from __future__ import annotations

import pytest
import torch

from asrkit.io.checkpoint import CheckpointError, load_checkpoint
from asrkit.models.state import load_weights
from asrkit.models.wenet_state import from_wenet_state, is_wenet_state
from tests.models.wenet_reference import FIXTURES, load_wenet_model

TABLES = ["encoder.embed.pos_enc.pe", "decoder.left_decoder.embed.1.pe", "decoder.right_decoder.embed.1.pe"]


@pytest.fixture(scope="module", params=["offline", "u2pp"])
def wenet(request):
    return request.param, load_wenet_model(request.param), load_checkpoint(FIXTURES / request.param / "epoch_5.pt")


def test_every_wenet_key_is_mapped_or_checked(wenet):
    name, model, checkpoint = wenet
    state = checkpoint["model"]
    assert is_wenet_state(state)
    mapped = from_wenet_state(state, name)
    assert set(mapped) == set(model.state_dict())  # nothing missing, nothing extra
    assert len(mapped) == len(state) - len(TABLES)
    for wenet_name, ours in [("encoder.global_cmvn.mean", "cmvn.mean"), ("encoder.global_cmvn.istd", "cmvn.istd"),
                             ("encoder.embed.out.0.weight", "encoder.embed.out.weight"),
                             ("decoder.left_decoder.embed.0.weight", "decoder.left_decoder.embed.weight")]:
        assert torch.equal(model.state_dict()[ours], state[wenet_name])
    # every other key kept its name and its values
    renamed = {"encoder.global_cmvn.mean", "encoder.global_cmvn.istd", "encoder.embed.out.0.weight",
               "encoder.embed.out.0.bias", "decoder.left_decoder.embed.0.weight",
               "decoder.right_decoder.embed.0.weight", *TABLES}
    for key in set(state) - renamed:
        assert torch.equal(model.state_dict()[key], state[key]), key


@pytest.mark.parametrize("change", ["extra", "missing"])
def test_one_extra_or_missing_key_is_refused_naming_it(wenet, change):
    name, model, checkpoint = wenet
    state = dict(checkpoint["model"])
    if change == "extra":
        state["encoder.encoders.0.self_attn.linear_extra.weight"] = torch.zeros(2)
        key = "encoder.encoders.0.self_attn.linear_extra.weight"
    else:
        key = "encoder.encoders.1.feed_forward.w_2.bias"
        del state[key]
    with pytest.raises(CheckpointError, match=f"{change} '{key}'"):
        load_weights(model, {"model": state}, "epoch_5.pt")


def test_a_positional_table_that_is_not_the_sinusoid_is_refused(wenet):
    name, model, checkpoint = wenet
    state = dict(checkpoint["model"])
    table = state["decoder.right_decoder.embed.1.pe"].clone()
    table[0, 7, 3] += 1e-3
    state["decoder.right_decoder.embed.1.pe"] = table
    with pytest.raises(CheckpointError, match="'decoder.right_decoder.embed.1.pe' is not the sinusoid"):
        load_weights(model, {"model": state}, "epoch_5.pt")


def test_asrkit_state_is_not_taken_for_wenets(wenet):
    name, model, _ = wenet
    assert not is_wenet_state(model.state_dict())
