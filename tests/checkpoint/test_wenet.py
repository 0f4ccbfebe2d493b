"""WeNet checkpoints as WeNet saves them (``tests/fixtures/wenet/*/epoch_5.pt``): every key
is accounted for -- renamed, or a positional table checked and dropped -- and nothing is
ever loaded with a key missing or left over."""
from __future__ import annotations

import pytest
import torch

from asrkit.checkpoint.load import CheckpointError, load_checkpoint
from asrkit.checkpoint.weights import load_weights
from asrkit.models.embedding import sinusoid_table
from asrkit.checkpoint.wenet import check_table, from_wenet_state, is_wenet_state
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


def test_a_table_rounded_by_another_cpus_kernels_is_accepted():
    """Two correct float32 tables differ by a few ulps of the angle, growing with the position
    (2.4e-4 at p = 5000 between an AVX-512 EPYC's and an AMX Xeon's): the order of the float32
    operations changed here gives such a table, which must load; 1e-2 off at row 4999 must not
    (float32's allowance there is 2.4e-3)."""
    d = 256
    positions = torch.arange(5000, dtype=torch.float32).unsqueeze(1)
    angles = positions * torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float32) / d)
    table = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(1)[None]
    assert float((table[0] - sinusoid_table(torch.arange(5000), d)).abs().max()) > 1e-5  # (not bit-equal)
    check_table("encoder.embed.pos_enc.pe", table, "epoch_5.pt")
    table[0, 4999, 3] += 1e-2
    with pytest.raises(CheckpointError, match="is not the sinusoid"):
        check_table("encoder.embed.pos_enc.pe", table, "epoch_5.pt")


def test_asrkit_state_is_not_taken_for_wenets(wenet):
    name, model, _ = wenet
    assert not is_wenet_state(model.state_dict())
