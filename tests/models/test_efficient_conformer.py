"""Efficient Conformer (``encoder: efficientConformer``) against WeNet's own encoder: the fixtures of
``tests/fixtures/wenet/efficient_conformer`` (README.md there says how WeNet made them) hold WeNet's
weights, a padded batch and WeNet's outputs and output lengths; asrkit's encoder, built from the
same ``encoder_conf`` and loaded through asrkit's WeNet name mapping, must give the same numbers
and lengths (full context; for the causal model the masked chunk forward and chunk by chunk with
WeNet's caches).  Then the model-level checks, WeNet's two LibriSpeech recipes, and the schema:
WeNet's keys (flat or under ``efficient_conf``) load, the keys of other encoders are refused."""
from __future__ import annotations

import functools

import pytest
import torch
import yaml

from asrkit.config import TrainConfig
from asrkit.models.efficient_conformer import EfficientConformerEncoder
from asrkit.models.efficient_conformer_layers import GroupedRelPositionMultiHeadedAttention
from asrkit.schema import ConfigError, build, check_all
from tests.models import wenet_encoder_parity as parity

FIXTURES = parity.WENET_FIXTURES / "efficient_conformer"
# (90, 67, 41 input frames) -> WeNet's output lengths
LENGTHS = {"v1": [11, 8, 5], "v2": [8, 6, 4], "causal": [11, 8, 5]}


# (asrkit's encoder loaded with WeNet's weights of fixture ``name``, the fixture)
wenet_encoder = functools.partial(parity.wenet_encoder, FIXTURES, "efficientConformer")


@pytest.mark.parametrize("name", sorted(LENGTHS))
def test_full_context_equals_wenet(name):
    assert parity.full_context_equals_wenet(*wenet_encoder(name)) == LENGTHS[name]


def test_chunks_equal_wenet():
    """The causal model: the masked forward of the batch and the chunk-by-chunk forward of one
    utterance with WeNet's caches (chunks 4 and 8 front-end frames, all or one left chunk)."""
    encoder, record = wenet_encoder("causal")
    assert all("out_lengths" in case for case in record["chunks"])
    assert len(list(parity.chunks_equal_wenet(encoder, record, fixed_cache=False))) == 3


def test_chunk_caches_have_wenets_shapes():
    """Every block's attention cache at the front end's rate (a block after the stride stores
    its rows twice), the convolution caches padded to the first kernel's ``kernel − 1``."""
    encoder, record = wenet_encoder("causal")
    xs = record["feats"][:1, :19]  # (4 − 1)·4 + 6 + 1 frames: a chunk of 4 front-end frames
    none = torch.zeros(0, 0, 0, 0)
    with torch.no_grad():
        y, att, cnn = encoder.forward_chunk(xs, 0, 4, none, none)
        y2, att2, cnn2 = encoder.forward_chunk(xs, 2, 4, att, cnn)
    assert y.shape == (1, 2, 32) and att.shape == (4, 2, 4, 32) and cnn.shape == (4, 1, 32, 4)
    assert att2.shape == att.shape and cnn2.shape == cnn.shape
    torch.testing.assert_close(att[2, :, 0::2], att[2, :, 1::2])  # block 2 runs at half the rate
    assert not cnn[2, :, :, :3].any()  # its kernel is 2 (5 // 2): one frame, zero-padded on the left


def test_grouped_attention_layout():
    """WeNet's grouping: the frames padded to a multiple of the group, then read ``g`` frames at a
    time as ``H`` rows of ``g · d_k`` in memory order; the output is cut back to the frames."""
    torch.manual_seed(0)
    attn = GroupedRelPositionMultiHeadedAttention(2, 8, 0.0, 3).eval()
    assert attn.pos_bias_u.shape == (2, 12)
    x = torch.arange(2 * 2 * 4 * 4, dtype=torch.float32).view(2, 2, 4, 4)
    grouped = attn.grouped(x)
    assert grouped.shape == (2, 2, 2, 12)
    frames = torch.nn.functional.pad(x, (0, 0, 0, 2)).transpose(1, 2).reshape(2, 2, 24)
    torch.testing.assert_close(grouped.transpose(1, 2).reshape(2, 2, 24), frames)
    h = torch.randn(2, 7, 8)
    out = attn(h, h, h, torch.ones(2, 1, 7, dtype=torch.bool), torch.randn(1, 7, 8))
    assert out.shape == (2, 7, 8)


TINY = {"encoder": "efficientConformer",
        "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 3,
                         "cnn_module_kernel": 5, "causal": True, "use_dynamic_chunk": True,
                         "cnn_module_norm": "layer_norm",
                         "efficient_conf": {"stride_layer_idx": [1], "stride": [2], "group_layer_idx": [1, 2],
                                            "group_size": 2}},
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3}}


def test_model_builds_trains_and_decodes():
    model, feats, lengths = parity.trained_tiny_model(TINY, EfficientConformerEncoder)
    for name, p in model.encoder.named_parameters():
        if not p.requires_grad:  # WeNet's unused concat_linear of a strided block
            assert ".concat_linear." in name, name
    _, enc_lengths, _, _ = parity.chunked_decode_matches(model, feats, lengths, 1)
    assert enc_lengths.tolist() == [6, 4]


@pytest.mark.parametrize("version, params, kernels", [("v1", 33_583_872, [15] * 4 + [7] * 8),
                                                      ("v2", 34_450_176, [15] * 12)])
def test_wenet_recipes(version, params, kernels):
    """WeNet's LibriSpeech U2++ Efficient Conformer recipes load whole (the keys under
    ``efficient_conf``); the encoders have the parameter counts WeNet's own code builds from
    them (80 mel bins)."""
    raw = yaml.safe_load((FIXTURES.parent / f"librispeech_train_u2++_efficonformer_{version}.yaml").read_text())
    assert check_all(TrainConfig, raw) == []
    conf = build(TrainConfig, {k: raw[k] for k in ("encoder", "encoder_conf")}).encoder_conf
    encoder = EfficientConformerEncoder(80, conf)
    assert sum(p.numel() for p in encoder.parameters()) == params
    assert encoder.kernels == kernels and encoder.embed.rate == (4 if version == "v1" else 2)
    assert encoder.total_stride == (2 if version == "v1" else 4)


def test_wenet_defaults():
    conf = build(TrainConfig, {"encoder": "efficientConformer", "encoder_conf": {
        "output_size": 24, "attention_heads": 2, "linear_units": 16}}).encoder_conf
    encoder = EfficientConformerEncoder(20, conf)
    assert len(encoder.encoders) == 6 and encoder.strides == [1, 1, 1, 2, 1, 1]
    assert encoder.groups == [3, 3, 3, 3, 0, 0] and encoder.kernels == [15] * 4 + [7] * 2
    layer = encoder.encoders[0]
    assert isinstance(layer.self_attn, GroupedRelPositionMultiHeadedAttention) and layer.self_attn.dropout_rate == 0.0
    assert layer.feed_forward_macaron is not None and encoder.normalize_before and encoder.activation_type == "swish"
    assert isinstance(layer.conv_module.norm, torch.nn.BatchNorm1d) and layer.conv_module.lorder == 0


@pytest.mark.parametrize("encoder, key, value", [
    ("efficientConformer", "encoder_dim", 128), ("efficientConformer", "key_bias", False),
    ("efficientConformer", "selfattention_layer_type", "selfattn"), ("efficientConformer", "merge_conv_kernel", 5),
    ("conformer", "stride_layer_idx", [2]), ("conformer", "group_size", 2), ("squeezeformer", "stride_kernel", False),
    ("e_branchformer", "efficient_conf", {"stride": 2})])
def test_keys_of_another_encoder_refused(encoder, key, value):
    parity.assert_key_of_another_encoder_refused(encoder, key, value)


@pytest.mark.parametrize("conf, message", [
    ({"stride_layer_idx": [1, 2], "stride": 2}, "need as many entries"),
    ({"stride_layer_idx": [2, 1], "stride": [2, 2]}, "must ascend"),
    ({"group_layer_idx": [5]}, r"group_layer_idx: \[5\] must name blocks in \[0, 3\)"),
    ({"use_cnn_module": False}, "use_cnn_module: false with strided blocks"),
    ({"cnn_module_kernel": 5}, r"kernels \[5, 5, 2\]"),
    ({"pos_enc_layer_type": "abs_pos"}, "takes rel_pos only")])
def test_unsupported_values_refused(conf, message):
    base = {"num_blocks": 3, "output_size": 16, "attention_heads": 2, "stride_layer_idx": 1, "group_layer_idx": [0]}
    with pytest.raises((ValueError, ConfigError), match=message):
        cfg = build(TrainConfig, {"encoder": "efficientConformer", "encoder_conf": {**base, **conf}})
        EfficientConformerEncoder(20, cfg.encoder_conf)


def test_schema_refusals():
    with pytest.raises(ConfigError, match="stride: given both in encoder_conf and in encoder_conf.efficient_conf"):
        build(TrainConfig, {"encoder": "efficientConformer",
                            "encoder_conf": {"stride": 2, "efficient_conf": {"stride": 3}}})
    with pytest.raises(ConfigError, match="'conv2d2' is implemented for encoder efficientConformer only"):
        build(TrainConfig, {"encoder": "conformer", "encoder_conf": {"input_layer": "conv2d2"}})
    with pytest.raises(ConfigError, match="efficient_conf.strides: unknown key"):
        build(TrainConfig, {"encoder": "efficientConformer", "encoder_conf": {"efficient_conf": {"strides": 2}}})
