"""Shared checks of the WeNet-parity encoder tests (branchformer, e_branchformer, squeezeformer,
efficientConformer): load a fixture of ``tests/fixtures/wenet/<dir>`` (WeNet's weights, a padded
batch, WeNet's outputs) into asrkit's encoder through the WeNet name mapping, compare outputs on
the valid frames at 1e-4, run the chunked forwards against WeNet's numbers, and one training step
of a tiny model with the encoder."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch

from asrkit.checkpoint.wenet import from_wenet_state, is_wenet_state
from asrkit.config import TrainConfig
from asrkit.models import build_model
from asrkit.models.registry import ENCODERS
from asrkit.schema import ConfigError, build
from asrkit.text.vocabulary import Vocabulary
from tests.models.tiny import random_batch

WENET_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wenet"


def wenet_encoder(fixtures: Path, encoder: str, name: str):
    """(asrkit's ``encoder`` loaded with WeNet's weights of fixture ``fixtures/<name>.pt``, the fixture)."""
    record = torch.load(fixtures / f"{name}.pt", weights_only=True)
    cfg = build(TrainConfig, {"encoder": encoder, "encoder_conf": record["config"]})
    module = ENCODERS[encoder](record["input_dim"], cfg.encoder_conf).eval()
    assert is_wenet_state(record["state"])
    state = from_wenet_state(record["state"], name, ["encoder." + k for k in module.state_dict()])
    module.load_state_dict({k.removeprefix("encoder."): v for k, v in state.items()}, strict=True)
    return module, record


def assert_valid_close(out, lengths, want) -> None:
    """``out`` has ``want``'s shape and equals it (1e-4) on each utterance's first ``lengths`` frames."""
    assert out.shape == want.shape
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(out[b, :n], want[b, :n], atol=1e-4, rtol=0)


def full_context_equals_wenet(encoder, record) -> list[int]:
    """The full-context forward of the fixture's batch: WeNet's lengths and outputs; returns the lengths."""
    with torch.no_grad():
        out, lengths = encoder(record["feats"], record["lengths"])
    assert lengths.tolist() == record["out_lengths"].tolist()
    assert_valid_close(out, lengths, record["out"])
    return lengths.tolist()


def chunks_equal_wenet(encoder, record, fixed_cache: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """For each of the fixture's chunk cases: the masked forward of the batch (and its lengths, where
    the case holds WeNet's) and the chunk-by-chunk forward of the first utterance with a growing
    cache equal WeNet's; ``fixed_cache``: so does a fixed-size cache (left chunks >= 0), otherwise
    the encoder refuses it.  Yields ``(masked out, by_chunk)`` per case for the caller's checks."""
    assert record["chunks"]
    first = record["feats"][:1, :int(record["lengths"][0])]
    with torch.no_grad():
        for case in record["chunks"]:
            out, lengths = encoder(record["feats"], record["lengths"], case["chunk"], case["left"])
            if "out_lengths" in case:
                assert lengths.tolist() == case["out_lengths"].tolist()
            assert_valid_close(out, lengths, case["out"])
            by_chunk, _ = encoder.forward_chunk_by_chunk(first, case["chunk"], case["left"])
            torch.testing.assert_close(by_chunk, case["by_chunk"], atol=1e-4, rtol=0)
            yield out, by_chunk
            if fixed_cache and case["left"] >= 0:
                fixed, _ = encoder.forward_chunk_by_chunk(first, case["chunk"], case["left"], fixed_cache=True)
                torch.testing.assert_close(fixed, case["by_chunk"], atol=1e-4, rtol=0)
        if not fixed_cache:
            with pytest.raises(ValueError, match="growing attention cache only"):
                encoder.forward_chunk_by_chunk(first, 4, 1, fixed_cache=True)


def trained_tiny_model(config: dict, encoder_type: type, check_grads: bool = True):
    """A tiny model of ``config`` (20 features, 12 units) after one forward and backward of a random
    batch of 50 and 37 frames: ``(model, feats, lengths)``; the loss finite and, ``check_grads``,
    every trainable encoder parameter with a finite gradient."""
    torch.manual_seed(0)
    model = build_model(build(TrainConfig, config), 20, Vocabulary.of_size(12))
    assert isinstance(model.encoder, encoder_type)
    feats, lengths, target, target_lengths = random_batch([50, 37])
    out = model(feats, lengths, target, target_lengths)
    loss = out["loss"] if isinstance(out, dict) else out[0]
    loss.backward()
    assert torch.isfinite(loss)
    if check_grads:
        for name, p in model.encoder.named_parameters():
            if p.requires_grad:
                assert p.grad is not None and torch.isfinite(p.grad).all(), name
    return model, feats, lengths


def chunked_decode_matches(model, feats, lengths, left: int):
    """The trained tiny model in eval mode: utterance 0 (50 frames) chunk by chunk (chunks of 4,
    ``left`` left chunks) equals its masked chunk forward (1e-5); the full forward of the batch has
    one row per utterance.  Returns ``(enc, enc_lengths, masked, by_chunk)``."""
    model.eval()
    with torch.no_grad():
        enc, enc_lengths = model.encoder(feats, lengths)
        masked, _ = model.encoder(feats[:1, :50], lengths[:1], 4, left)
        by_chunk, _ = model.encoder.forward_chunk_by_chunk(feats[:1, :50], 4, left)
    torch.testing.assert_close(by_chunk, masked[:, :by_chunk.size(1)], atol=1e-5, rtol=0)
    assert enc.shape[:2] == (2, int(enc_lengths.max()))
    return enc, enc_lengths, masked, by_chunk


def assert_key_of_another_encoder_refused(encoder: str, key: str, value) -> None:
    with pytest.raises(ConfigError, match=f"encoder_conf.{key}: .* read only by encoder"):
        build(TrainConfig, {"encoder": encoder, "encoder_conf": {key: value}})
