"""Squeezeformer (``encoder: squeezeformer``) against WeNet's own encoder: the fixtures of
``tests/fixtures/wenet/squeezeformer`` (README.md there says how WeNet made them) hold WeNet's
weights, a padded batch and WeNet's outputs and output lengths; asrkit's encoder, built from
the same ``encoder_conf`` and loaded through asrkit's WeNet name mapping, must give the same
numbers and lengths (full context; for the streaming model the masked chunk forward and chunk
by chunk with WeNet's caches).  Then the model-level checks: a model with ``encoder:
squeezeformer`` builds, trains a step and decodes; the schema takes WeNet's recipe keys and
refuses those WeNet's squeezeformer does not read."""
from __future__ import annotations

import functools

import pytest
import torch
import yaml

from asrkit.config import TrainConfig
from asrkit.models.squeezeformer import SqueezeformerEncoder
from asrkit.schema import ConfigError, build, check_all
from tests.models import wenet_encoder_parity as parity

FIXTURES = parity.WENET_FIXTURES / "squeezeformer"
NAMES = ("conv1d", "conv2d", "stream", "no_reduction")


# (asrkit's encoder loaded with WeNet's weights of fixture ``name``, the fixture)
wenet_encoder = functools.partial(parity.wenet_encoder, FIXTURES, "squeezeformer")


@pytest.mark.parametrize("name", NAMES)
def test_full_context_equals_wenet(name):
    encoder, record = wenet_encoder(name)
    # WeNet's lengths: its [:-2:2] mask cuts keep one or two frames more than the convolutions for
    # an utterance shorter than the batch (90, 67, 41 input frames -> 21, 17, 11; alone 21, 16, 9)
    assert parity.full_context_equals_wenet(encoder, record) == [21, 17, 11]
    assert encoder.embed.output_lengths(record["lengths"]).tolist() == [21, 16, 9]


def test_chunks_equal_wenet():
    """The streaming model (stream time reduction, causal convolutions): the masked forward
    of the batch and the chunk-by-chunk forward of one utterance with WeNet's caches."""
    encoder, record = wenet_encoder("stream")
    assert len(list(parity.chunks_equal_wenet(encoder, record, fixed_cache=False))) == 3


def test_chunk_caches_have_wenets_shapes():
    """Every block's attention cache at the subsampled rate (a reduced block's rows stored
    twice), the causal convolutions' caches at encoder_dim channels."""
    encoder, record = wenet_encoder("stream")
    xs = record["feats"][:1, :19]  # (4 − 1)·4 + 6 + 1 frames: a chunk of 4
    with torch.no_grad():
        y, att, cnn = encoder.forward_chunk(xs, 0, 4, torch.zeros(0, 0, 0, 0), torch.zeros(0, 0, 0, 0))
        y2, att2, cnn2 = encoder.forward_chunk(xs, 4, 4, att, cnn)
    assert y.shape == (1, 4, 32) and att.shape == (4, 2, 4, 32) and cnn.shape == (4, 1, 32, 4)
    assert att2.shape == att.shape and cnn2.shape == cnn.shape
    torch.testing.assert_close(att[1, :, 0::2], att[1, :, 1::2])  # block 1 runs at half the rate


TINY = {"encoder": "squeezeformer",
        "encoder_conf": {"encoder_dim": 32, "output_size": 32, "attention_heads": 2, "num_blocks": 3,
                         "reduce_idx": 1, "recover_idx": 2, "feed_forward_expansion_factor": 2,
                         "cnn_module_kernel": 5, "time_reduction_layer_type": "stream", "causal": True,
                         "use_dynamic_chunk": True, "cnn_norm_type": "layer_norm", "do_rel_shift": False},
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3}}


def test_model_builds_trains_and_decodes():
    model, feats, lengths = parity.trained_tiny_model(TINY, SqueezeformerEncoder)
    parity.chunked_decode_matches(model, feats, lengths, 1)


RECIPE = FIXTURES.parent / "librispeech_train_u2++_squeezeformer.yaml"  # WeNet's, as it is


def test_wenet_recipe_and_defaults():
    """WeNet's LibriSpeech U2++ squeezeformer recipe loads whole; its encoder has the parameter
    count WeNet's own code builds from it (33,664,512 for 80 mel bins)."""
    raw = yaml.safe_load(RECIPE.read_text())
    assert check_all(TrainConfig, raw) == []
    conf = build(TrainConfig, {k: raw[k] for k in ("encoder", "encoder_conf")}).encoder_conf
    assert (conf.feed_forward_expansion_factor, conf.time_reduction_layer_type, conf.do_rel_shift) == (8, "stream",
                                                                                                     False)
    assert sum(p.numel() for p in SqueezeformerEncoder(80, conf).parameters()) == 33_664_512
    defaults = build(TrainConfig, {"encoder": "squeezeformer"}).encoder_conf
    assert SqueezeformerEncoder.blocks(defaults) == 12
    defaults.encoder_dim = defaults.output_size = 16  # (WeNet's other defaults, at a size that builds quickly)
    encoder = SqueezeformerEncoder(80, defaults)
    layer = encoder.encoders[0]
    assert (encoder.reduce_idx, encoder.recover_idx, encoder.normalize_before) == ([5], [11], False)
    assert encoder.factors == [1] * 5 + [2] * 6 + [1] and encoder.final_proj is None
    assert layer.conv_module.depthwise_conv.kernel_size == (31,) and layer.conv_module.lorder == 0
    assert isinstance(layer.conv_module.norm, torch.nn.BatchNorm1d) and layer.self_attn.do_rel_shift
    assert layer.self_attn.dropout_rate == 0.1 and layer.ffn1.w_1.out_features == 64
    assert isinstance(layer.ffn1.activation, torch.nn.SiLU) and layer.ffn1.ada_scale.requires_grad
    assert type(encoder.time_reduction_layer).__name__ == "TimeReductionLayer1D"


@pytest.mark.parametrize("encoder, key, value", [
    ("squeezeformer", "linear_units", 1024), ("squeezeformer", "dropout_rate", 0.2),
    ("squeezeformer", "input_layer", "conv2d6"), ("squeezeformer", "macaron_style", False),
    ("squeezeformer", "cnn_module_norm", "layer_norm"), ("squeezeformer", "merge_conv_kernel", 5),
    ("conformer", "reduce_idx", 3), ("conformer", "adaptive_scale", False), ("e_branchformer", "encoder_dim", 128),
    ("transformer", "cnn_norm_type", "layer_norm")])
def test_keys_of_another_encoder_refused(encoder, key, value):
    parity.assert_key_of_another_encoder_refused(encoder, key, value)


@pytest.mark.parametrize("conf, message", [
    ({"recover_idx": None}, "recover_idx: null with reduce_idx"),
    ({"reduce_idx": [1, 3], "recover_idx": 5}, "need as many indices"),
    ({"reduce_idx": [3, 1], "recover_idx": [4, 5]}, "ascending list"),
    ({"reduce_idx": 2, "recover_idx": 1}, "recovers a reduction that has not happened"),
    ({"reduce_idx": 1, "recover_idx": 7}, r"block indices in \[0, 3\)"),
    ({"cnn_module_kernel": 4}, "cnn_module_kernel must be odd without causal")])
def test_unsupported_values_refused(conf, message):
    base = {"num_blocks": 3, "encoder_dim": 16, "output_size": 16, "reduce_idx": 1, "recover_idx": 2}
    cfg = build(TrainConfig, {"encoder": "squeezeformer", "encoder_conf": {**base, **conf}})
    with pytest.raises(ValueError, match=message):
        SqueezeformerEncoder(20, cfg.encoder_conf)


def test_schema_refusals():
    with pytest.raises(ConfigError, match="pos_enc_layer_type: 'abs_pos': encoder squeezeformer takes rel_pos only"):
        build(TrainConfig, {"encoder": "squeezeformer", "encoder_conf": {"pos_enc_layer_type": "abs_pos"}})
    with pytest.raises(ConfigError, match="time_reduction_layer_type"):
        build(TrainConfig, {"encoder": "squeezeformer", "encoder_conf": {"time_reduction_layer_type": "conv3d"}})
    with pytest.raises(ConfigError, match="concat_after"):
        build(TrainConfig, {"encoder": "squeezeformer", "encoder_conf": {"concat_after": True}})
