"""E-Branchformer (``encoder: e_branchformer``) against WeNet's own encoder: the fixtures of
``tests/fixtures/wenet/e_branchformer`` (README.md there says how WeNet made them) hold WeNet's
weights, a padded batch and WeNet's outputs; asrkit's encoder, built from the same
``encoder_conf`` and loaded through asrkit's WeNet name mapping, must give the same numbers
(full context; for the causal model the masked chunk forward and chunk by chunk).  Then the
model-level checks: a model with ``encoder: e_branchformer`` builds, trains a step and decodes;
the schema takes WeNet's recipe keys and refuses those WeNet's e_branchformer does not read."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asrkit.checkpoint.wenet import from_wenet_state, is_wenet_state
from asrkit.config import TrainConfig
from asrkit.models import build_model
from asrkit.models.e_branchformer import EBranchformerEncoder
from asrkit.models.registry import ENCODERS
from asrkit.schema import ConfigError, build
from asrkit.text.vocabulary import Vocabulary
from tests.models.tiny import random_batch

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wenet" / "e_branchformer"
NAMES = ("defaults", "causal", "no_macaron", "no_ffn")


def wenet_encoder(name: str):
    """(asrkit's encoder loaded with WeNet's weights of fixture ``name``, the fixture)."""
    record = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    cfg = build(TrainConfig, {"encoder": "e_branchformer", "encoder_conf": record["config"]})
    encoder = ENCODERS["e_branchformer"](record["input_dim"], cfg.encoder_conf).eval()
    assert is_wenet_state(record["state"])
    state = from_wenet_state(record["state"], name, ["encoder." + k for k in encoder.state_dict()])
    encoder.load_state_dict({k.removeprefix("encoder."): v for k, v in state.items()}, strict=True)
    return encoder, record


def assert_valid_close(out, lengths, want) -> None:
    assert out.shape == want.shape
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(out[b, :n], want[b, :n], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_full_context_equals_wenet(name):
    encoder, record = wenet_encoder(name)
    with torch.no_grad():
        out, lengths = encoder(record["feats"], record["lengths"])
    assert lengths.tolist() == record["out_lengths"].tolist()
    assert_valid_close(out, lengths, record["out"])


def test_chunks_equal_wenet():
    """The causal model: the masked forward of the batch, and the chunk-by-chunk forward of
    one utterance with caches (growing and fixed-size), WeNet's numbers for each -- which
    differ from each other: WeNet's merge convolution keeps no cache between chunks."""
    encoder, record = wenet_encoder("causal")
    assert record["chunks"]
    first = record["feats"][:1, :int(record["lengths"][0])]
    with torch.no_grad():
        for case in record["chunks"]:
            out, lengths = encoder(record["feats"], record["lengths"], case["chunk"], case["left"])
            assert_valid_close(out, lengths, case["out"])
            by_chunk, _ = encoder.forward_chunk_by_chunk(first, case["chunk"], case["left"])
            torch.testing.assert_close(by_chunk, case["by_chunk"], atol=1e-4, rtol=0)
            assert (by_chunk - out[:1, :by_chunk.size(1)]).abs().max() > 1e-2
            if case["left"] >= 0:
                fixed, _ = encoder.forward_chunk_by_chunk(first, case["chunk"], case["left"], fixed_cache=True)
                torch.testing.assert_close(fixed, case["by_chunk"], atol=1e-4, rtol=0)


TINY = {"encoder": "e_branchformer",
        "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 48, "cgmlp_linear_units": 64,
                         "cgmlp_conv_kernel": 5, "num_blocks": 2, "causal": True, "use_dynamic_chunk": True},
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3}}


def test_model_builds_trains_and_decodes():
    torch.manual_seed(0)
    model = build_model(build(TrainConfig, TINY), 20, Vocabulary.of_size(12))
    assert isinstance(model.encoder, EBranchformerEncoder)
    feats, lengths, target, target_lengths = random_batch([50, 37])
    out = model(feats, lengths, target, target_lengths)
    loss = out["loss"] if isinstance(out, dict) else out[0]
    loss.backward()  # (no optimizer step: torch.optim's first step costs 2 s of imports)
    assert torch.isfinite(loss)
    for name, p in model.encoder.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
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
    with pytest.raises(ConfigError, match=f"encoder_conf.{key}: .* read only by encoder"):
        build(TrainConfig, {"encoder": encoder, "encoder_conf": {key: value}})


def test_unsupported_values_refused():
    with pytest.raises(ConfigError, match="stochastic_depth_rate"):
        build(TrainConfig, {"encoder": "e_branchformer", "encoder_conf": {"stochastic_depth_rate": 0.1}})
    with pytest.raises(ValueError, match="merge_conv_kernel must be odd without causal"):
        EBranchformerEncoder(20, build(TrainConfig, {"encoder": "e_branchformer", "encoder_conf": {
            "num_blocks": 1, "merge_conv_kernel": 4}}).encoder_conf)
