"""Branchformer (``encoder: branchformer``) against WeNet's own encoder: the fixtures of
``tests/fixtures/wenet/branchformer`` (README.md there says how WeNet made them) hold WeNet's
weights, a padded batch and WeNet's outputs; asrkit's encoder, built from the same
``encoder_conf`` and loaded through asrkit's WeNet name mapping, must give the same numbers.
Then the model-level checks: a model with ``encoder: branchformer`` builds, trains a step
and decodes; the schema refuses the keys WeNet's branchformer does not read."""
from __future__ import annotations

import functools

import pytest
import torch

from asrkit.config import TrainConfig
from asrkit.models.branchformer import BranchformerEncoder
from asrkit.models.registry import ENCODERS
from asrkit.schema import ConfigError, build
from tests.models import wenet_encoder_parity as parity

FIXTURES = parity.WENET_FIXTURES / "branchformer"
NAMES = ("concat", "causal_fixed_ave", "learned_ave")


# (asrkit's encoder loaded with WeNet's weights of fixture ``name``, the fixture)
wenet_encoder = functools.partial(parity.wenet_encoder, FIXTURES, "branchformer")


@pytest.mark.parametrize("name", NAMES)
def test_full_context_equals_wenet(name):
    parity.full_context_equals_wenet(*wenet_encoder(name))


def test_chunks_equal_wenet():
    """The causal model: the masked forward of the batch and the chunk-by-chunk forward with
    caches (growing and fixed-size) of one utterance, WeNet's numbers for each."""
    for _ in parity.chunks_equal_wenet(*wenet_encoder("causal_fixed_ave"), fixed_cache=True):
        pass


def test_learned_ave_does_not_stream():
    encoder, record = wenet_encoder("learned_ave")
    with pytest.raises(ValueError, match="learned_ave .* does not stream"):
        encoder.forward_chunk_by_chunk(record["feats"][:1, :40], 4)


TINY = {"encoder": "branchformer",
        "encoder_conf": {"output_size": 32, "attention_heads": 2, "cgmlp_linear_units": 64, "cgmlp_conv_kernel": 5,
                         "num_blocks": 2, "causal": True, "use_dynamic_chunk": True},
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3}}


def test_model_builds_trains_and_decodes():
    model, feats, lengths = parity.trained_tiny_model(TINY, BranchformerEncoder, check_grads=False)
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    _, _, chunked, by_chunk = parity.chunked_decode_matches(model, feats, lengths, -1)
    assert by_chunk.shape == chunked.shape


def test_wenet_defaults():
    conf = build(TrainConfig, {"encoder": "branchformer"}).encoder_conf
    encoder = BranchformerEncoder(80, conf)
    assert len(encoder.encoders) == 12  # WeNet's num_blocks default for this encoder
    layer = encoder.encoders[0]
    assert layer.merge_method == "concat" and layer.cgmlp.csgu.conv.kernel_size == (31,)
    assert layer.cgmlp.channel_proj1[0].out_features == 2048 and layer.cgmlp.csgu.linear is None
    assert encoder.pos_enc_type == "rel_pos" and encoder.attention_type == "rel_selfattn"
    assert len(ENCODERS["conformer"](80, build(TrainConfig, {}).encoder_conf).encoders) == 6


@pytest.mark.parametrize("encoder, key, value", [
    ("branchformer", "linear_units", 1024), ("branchformer", "macaron_style", False),
    ("branchformer", "activation_type", "relu"), ("conformer", "merge_method", "fixed_ave"),
    ("conformer", "cgmlp_linear_units", 512)])
def test_keys_of_another_encoder_refused(encoder, key, value):
    parity.assert_key_of_another_encoder_refused(encoder, key, value)


def test_per_block_lists_checked():
    with pytest.raises(ValueError, match="cgmlp_weight: 3 values for 2 blocks"):
        BranchformerEncoder(20, build(TrainConfig, {"encoder": "branchformer", "encoder_conf": {
            "num_blocks": 2, "merge_method": "fixed_ave", "cgmlp_weight": [0.1, 0.2, 0.3]}}).encoder_conf)
    with pytest.raises(ConfigError, match="cgmlp_weight: must be in"):
        build(TrainConfig, {"encoder": "branchformer", "encoder_conf": {"cgmlp_weight": 1.5}})
