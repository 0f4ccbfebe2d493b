"""Streaming encoder (U2/U2++): the chunk-masked full forward, and chunk-by-chunk inference
with attention and convolution caches, which must equal it for every encoder type asrkit has
(conformer with WeNet's rel_pos or Transformer-XL's rel_pos_xl and a causal convolution,
transformer with absolute positions)."""
from __future__ import annotations

import pytest
import torch

from asrkit.models.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention
from tests.models.tiny import tiny_streaming_model

CAUSAL = {"causal": True, "cnn_module_norm": "layer_norm"}
ENCODERS = {
    "conformer rel_pos": ("conformer", CAUSAL),
    "conformer rel_pos_xl": ("conformer", {**CAUSAL, "pos_enc_layer_type": "rel_pos_xl"}),
    "conformer post-norm batch_norm conv2d6": ("conformer", {"causal": True, "normalize_before": False,
                                                              "input_layer": "conv2d6"}),
    "transformer abs_pos": ("transformer", {}),
}


def encoder_of(name: str):
    return tiny_streaming_model(*ENCODERS[name]).encoder


def features(frames: int, seed: int = 3) -> torch.Tensor:
    return torch.randn(1, frames, 20, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(ENCODERS))
@torch.inference_mode()
def test_chunk_by_chunk_equals_masked_full_forward(name):
    encoder = encoder_of(name)
    feats = features(123)  # 30 encoder frames at rate 4 (19 at 6): the last chunk is partial
    length = torch.tensor([feats.size(1)])
    for chunk in (1, 4, 16):
        for left in (-1, 1, 2):
            masked, lengths = encoder(feats, length, chunk, left)
            streamed, streamed_lengths = encoder.forward_chunk_by_chunk(feats, chunk, left)
            assert torch.equal(streamed_lengths, lengths)
            assert (streamed - masked).abs().max() < 1e-5, (chunk, left)
    full, _ = encoder(feats, length)
    masked, _ = encoder(feats, length, 4, -1)
    assert (full - masked).abs().max() > 1e-3  # the chunk mask does limit the context


@pytest.mark.parametrize("name", ["conformer rel_pos", "conformer rel_pos_xl", "transformer abs_pos"])
@torch.inference_mode()
def test_fixed_size_padded_cache_equals_growing_cache(name):
    encoder = encoder_of(name)
    feats = features(123)
    for chunk, left in ((4, 2), (3, 1), (4, 0), (16, 1)):
        growing, _ = encoder.forward_chunk_by_chunk(feats, chunk, left)
        fixed, _ = encoder.forward_chunk_by_chunk(feats, chunk, left, fixed_cache=True)
        assert (fixed - growing).abs().max() < 1e-5, (chunk, left)


@torch.inference_mode()
def test_forward_chunk_cache_shapes_and_trimming():
    encoder = encoder_of("conformer rel_pos")
    window = 3 * 4 + 7  # 4 encoder frames at rate 4
    empty = torch.zeros(0, 0, 0, 0)
    ys, att, cnn = encoder.forward_chunk(features(window), 0, 8, empty, empty)
    assert ys.shape == (1, 4, 32) and att.shape == (2, 4, 4, 16) and cnn.shape == (2, 1, 32, 4)
    ys, att, cnn = encoder.forward_chunk(features(window, 4), 4, 6, att, cnn)
    assert att.shape == (2, 4, 6, 16) and cnn.shape == (2, 1, 32, 4)  # 4 + 4 keys, the last 6 kept
    _, none, _ = encoder.forward_chunk(features(window, 5), 8, 0, att, cnn)
    assert none.shape == (2, 4, 0, 16)
    transformer = encoder_of("transformer abs_pos")
    _, _, cnn = transformer.forward_chunk(features(window), 0, -1, empty, empty)
    assert cnn.shape == (2, 1, 32, 0)


@pytest.mark.parametrize("name", ["conformer rel_pos", "transformer abs_pos"])
@torch.inference_mode()
def test_large_chunk_equals_full_context_and_chunk_zero_is_full_context(name):
    encoder = encoder_of(name)
    feats = features(131)
    length = torch.tensor([131])
    full, _ = encoder(feats, length)
    assert torch.equal(encoder(feats, length, 0, 2)[0], full)
    assert (encoder(feats, length, 40, -1)[0] - full).abs().max() < 1e-5  # one chunk holds every frame


@pytest.mark.parametrize("name", ["conformer rel_pos", "transformer abs_pos"])
def test_padded_rows_without_keys_are_finite_in_values_and_gradients(name):
    encoder = encoder_of(name).train()
    feats = torch.cat([features(131), torch.cat([features(31, 5), torch.zeros(1, 100, 20)], dim=1)])
    lengths = torch.tensor([131, 31])  # 31 and 7 encoder frames: the short one's padded chunks see no key
    feats.requires_grad_(True)
    out, out_lengths = encoder(feats, lengths, 2, 0)
    assert torch.isfinite(out).all()
    out.sum().backward()  # padded rows included
    assert torch.isfinite(feats.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in encoder.parameters() if p.grad is not None)
    with torch.no_grad():  # and the batch computes each utterance as alone
        encoder.eval()
        batch, _ = encoder(feats, lengths, 2, 0)
        alone, _ = encoder(feats[1:, :31], lengths[1:], 2, 0)
        assert (batch[1, :int(out_lengths[1])] - alone[0]).abs().max() < 1e-5


@pytest.mark.parametrize("attention", [MultiHeadedAttention, RelPositionMultiHeadedAttention])
def test_attention_row_without_keys_has_zero_weights(attention):
    torch.manual_seed(0)
    att = attention(2, 8, 0.0)
    x = torch.randn(1, 4, 8, requires_grad=True)
    mask = torch.tensor([[[True, False, False, False], [True, True, False, False],
                          [False, False, False, False], [True, True, True, True]]])
    pos = torch.randn(1, 4, 8)
    out = att(x, x, x, mask, pos)
    torch.testing.assert_close(out[0, 2], att.linear_out.bias)  # zero context -> the output bias
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(out[:, [0, 1, 3]], att(x[:, [0, 1, 3]], x, x, mask[:, [0, 1, 3]], pos))
