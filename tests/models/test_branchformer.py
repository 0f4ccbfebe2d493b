"""Branchformer (``encoder: branchformer``) against WeNet's own encoder: the fixtures of
``tests/fixtures/wenet/branchformer`` (README.md there says how WeNet made them) hold WeNet's
weights, a padded batch and WeNet's outputs; asrkit's encoder, built from the same
``encoder_conf`` and loaded through asrkit's WeNet name mapping, must give the same numbers.
Then the model-level checks: a model with ``encoder: branchformer`` builds, trains a step
and decodes; the schema refuses the keys WeNet's branchformer does not read."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asrkit.checkpoint.wenet import from_wenet_state, is_wenet_state
from asrkit.config import TrainConfig
from asrkit.models import build_model
from asrkit.models.branchformer import BranchformerEncoder
from asrkit.models.registry import ENCODERS
from asrkit.schema import ConfigError, build
from asrkit.text.vocabulary import Vocabulary
from tests.models.tiny import random_batch

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wenet" / "branchformer"
NAMES = ("concat", "causal_fixed_ave", "learned_ave")


def wenet_encoder(name: str):
    """(asrkit's encoder loaded with WeNet's weights of fixture ``name``, the fixture)."""
    record = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    cfg = build(TrainConfig, {"encoder": "branchformer", "encoder_conf": record["config"]})
    encoder = ENCODERS["branchformer"](record["input_dim"], cfg.encoder_conf).eval()
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
    """The causal model: the masked forward of the batch and the chunk-by-chunk forward with
    caches (growing and fixed-size) of one utterance, WeNet's numbers for each."""
    encoder, record = wenet_encoder("causal_fixed_ave")
    assert record["chunks"]
    first = record["feats"][:1, :int(record["lengths"][0])]
    with torch.no_grad():
        for case in record["chunks"]:
            out, lengths = encoder(record["feats"], record["lengths"], case["chunk"], case["left"])
            assert_valid_close(out, lengths, case["out"])
            by_chunk, _ = encoder.forward_chunk_by_chunk(first, case["chunk"], case["left"])
            torch.testing.assert_close(by_chunk, case["by_chunk"], atol=1e-4, rtol=0)
            if case["left"] >= 0:
                fixed, _ = encoder.forward_chunk_by_chunk(first, case["chunk"], case["left"], fixed_cache=True)
                torch.testing.assert_close(fixed, case["by_chunk"], atol=1e-4, rtol=0)


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
    torch.manual_seed(0)
    model = build_model(build(TrainConfig, TINY), 20, Vocabulary.of_size(12))
    assert isinstance(model.encoder, BranchformerEncoder)
    feats, lengths, target, target_lengths = random_batch([50, 37])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(feats, lengths, target, target_lengths)
    loss = out["loss"] if isinstance(out, dict) else out[0]
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    model.eval()
    with torch.no_grad():
        enc, enc_lengths = model.encoder(feats, lengths)
        chunked, _ = model.encoder(feats[:1, :50], lengths[:1], 4, -1)
        by_chunk, _ = model.encoder.forward_chunk_by_chunk(feats[:1, :50], 4, -1)
    torch.testing.assert_close(by_chunk, chunked, atol=1e-5, rtol=0)
    assert enc.shape[:2] == (2, int(enc_lengths.max()))


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
    with pytest.raises(ConfigError, match=f"encoder_conf.{key}: .* read only by encoder"):
        build(TrainConfig, {"encoder": encoder, "encoder_conf": {key: value}})


def test_per_block_lists_checked():
    with pytest.raises(ValueError, match="cgmlp_weight: 3 values for 2 blocks"):
        BranchformerEncoder(20, build(TrainConfig, {"encoder": "branchformer", "encoder_conf": {
            "num_blocks": 2, "merge_method": "fixed_ave", "cgmlp_weight": [0.1, 0.2, 0.3]}}).encoder_conf)
    with pytest.raises(ConfigError, match="cgmlp_weight: must be in"):
        build(TrainConfig, {"encoder": "branchformer", "encoder_conf": {"cgmlp_weight": 1.5}})
