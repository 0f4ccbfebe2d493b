"""E-Branchformer (``encoder: e_branchformer``) against WeNet's own encoder: the fixtures of
``tests/fixtures/wenet/e_branchformer`` (README.md there says how WeNet made them) hold WeNet's
weights, a padded batch and WeNet's outputs; asrkit's encoder, built from the same
``encoder_conf`` and loaded through asrkit's WeNet name mapping, must give the same numbers
(full context; for the causal model the masked chunk forward and chunk by chunk).  Then the
model-level checks: a model with ``encoder: e_branchformer`` builds, trains a step and decodes;
the schema takes WeNet's recipe keys and refuses those WeNet's e_branchformer does not read."""
from __future__ import annotations

import functools

import pytest
import torch

from asrkit.config import TrainConfig
from asrkit.models.e_branchformer import EBranchformerEncoder
from asrkit.schema import ConfigError, build
from tests.models import wenet_encoder_parity as parity

FIXTURES = parity.WENET_FIXTURES / "e_branchformer"
NAMES = ("defaults", "causal", "no_macaron", "no_ffn")


# (asrkit's encoder loaded with WeNet's weights of fixture ``name``, the fixture)
wenet_encoder = functools.partial(parity.wenet_encoder, FIXTURES, "e_branchformer")


@pytest.mark.parametrize("name", NAMES)
def test_full_context_equals_wenet(name):
    parity.full_context_equals_wenet(*wenet_encoder(name))


def test_chunks_equal_wenet():
    """The causal model: the masked forward of the batch, and the chunk-by-chunk forward of
    one utterance with caches (growing and fixed-size), WeNet's numbers for each -- which
    differ from each other: WeNet's merge convolution keeps no cache between chunks."""
    for out, by_chunk in parity.chunks_equal_wenet(*wenet_encoder("causal"), fixed_cache=True):
        assert (by_chunk - out[:1, :by_chunk.size(1)]).abs().max() > 1e-2


TINY = {"encoder": "e_branchformer",
        "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 48, "cgmlp_linear_units": 64,
                         "cgmlp_conv_kernel": 5, "num_blocks": 2, "causal": True, "use_dynamic_chunk": True},
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3}}


def test_model_builds_trains_and_decodes():
    # (no optimizer step: torch.optim's first step costs 2 s of imports)
    model, feats, lengths = parity.trained_tiny_model(TINY, EBranchformerEncoder)
    assert all(p.requires_grad for p in model.encoder.parameters())
    model.eval()
    with torch.no_grad():
        enc, enc_lengths = model.encoder(feats, lengths)
        growing, _ = model.encoder.forward_chunk_by_chunk(feats[:1, :50], 4, 1)
        fixed, _ = model.encoder.forward_chunk_by_chunk(feats[:1, :50], 4, 1, fixed_cache=True)
    torch.testing.assert_close(fixed, growing, atol=1e-5, rtol=0)
    assert enc.shape[:2] == (2, int(enc_lengths.max()))


# encoder_conf of WeNet's examples/aishell/s0/conf/train_ebranchformer.yaml (01546996)
WENET_RECIPE = {"output_size": 256, "attention_heads": 8, "linear_units": 1024, "num_blocks": 17,
                "cgmlp_linear_units": 1024, "cgmlp_conv_kernel": 31, "use_linear_after_conv": False,
                "gate_activation": "identity", "merge_conv_kernel": 31, "dropout_rate": 0.1,
                "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1, "input_layer": "conv2d",
                "activation_type": "swish", "causal": False, "pos_enc_layer_type": "rel_pos",
                "selfattention_layer_type": "rel_selfattn"}


def test_wenet_recipe_and_defaults():
    conf = build(TrainConfig, {"encoder": "e_branchformer", "encoder_conf": WENET_RECIPE}).encoder_conf
    assert (conf.num_blocks, conf.merge_conv_kernel, conf.linear_units) == (17, 31, 1024)
    defaults = build(TrainConfig, {"encoder": "e_branchformer"}).encoder_conf
    assert EBranchformerEncoder.blocks(defaults) == 12  # WeNet's num_blocks default for this encoder
    defaults.num_blocks = 1  # (the other defaults; one block builds in a tenth of the time)
    encoder = EBranchformerEncoder(80, defaults)
    layer = encoder.encoders[0]
    assert layer.depthwise_conv_fusion.kernel_size == (3,) and layer.lorder == 0 and layer.ff_scale == 0.5
    assert layer.cgmlp.csgu.conv.kernel_size == (31,) and layer.cgmlp.csgu.linear is None
    assert layer.feed_forward.w_1.out_features == 2048 and isinstance(layer.feed_forward.activation, torch.nn.SiLU)
    assert encoder.pos_enc_type == "rel_pos" and encoder.attention_type == "rel_selfattn"


@pytest.mark.parametrize("encoder, key, value", [
    ("e_branchformer", "normalize_before", False), ("e_branchformer", "merge_method", "fixed_ave"),
    ("e_branchformer", "use_cnn_module", False), ("e_branchformer", "cnn_module_kernel", 5),
    ("e_branchformer", "use_attn", False), ("conformer", "merge_conv_kernel", 5), ("branchformer", "use_ffn", False),
    ("branchformer", "macaron_style", False)])
def test_keys_of_another_encoder_refused(encoder, key, value):
    parity.assert_key_of_another_encoder_refused(encoder, key, value)


def test_unsupported_values_refused():
    with pytest.raises(ConfigError, match="stochastic_depth_rate"):
        build(TrainConfig, {"encoder": "e_branchformer", "encoder_conf": {"stochastic_depth_rate": 0.1}})
    with pytest.raises(ValueError, match="merge_conv_kernel must be odd without causal"):
        EBranchformerEncoder(20, build(TrainConfig, {"encoder": "e_branchformer", "encoder_conf": {
            "num_blocks": 1, "merge_conv_kernel": 4}}).encoder_conf)
