"""Several streams' chunks through the encoder in one forward
(:meth:`BaseEncoder.forward_chunks`, driven by :func:`asrkit.stream.stacked_chunks.encode_chunks`):
streams at different positions -- one just started, one a few chunks in, one far enough in
that its attention cache is trimmed to its left chunks -- get the encoder frames and the
caches each gets alone, for every positional encoding asrkit has (absolute and WeNet's
relative encodings read each stream's start; Transformer-XL's does not)."""
from __future__ import annotations

import pytest
import torch

from asrkit.decode import DecodingOptions
from asrkit.models.mask import padded_cache_mask, padded_cache_masks
from asrkit.stream.stacked_chunks import encode_chunks
from asrkit.stream.recognizer import StreamingRecognizer
from tests.models.tiny import tiny_streaming_model

CAUSAL = {"causal": True, "cnn_module_norm": "layer_norm"}
ENCODERS = {
    "conformer rel_pos": ("conformer", CAUSAL),
    "conformer rel_pos_xl": ("conformer", {**CAUSAL, "pos_enc_layer_type": "rel_pos_xl"}),
    "transformer abs_pos": ("transformer", {}),
}
TOLERANCE = 1e-5  # float32: the batch's matmuls round differently from one stream's


def model_of(name: str):
    return tiny_streaming_model(*ENCODERS[name])


def recognizer(model, left: int, seconds: float, seed: int) -> StreamingRecognizer:
    """A stream fed ``seconds`` of noise, every full chunk run (alone)."""
    options = DecodingOptions(modes=("ctc_prefix_beam_search",), decoding_chunk_size=4, num_decoding_left_chunks=left,
                              beam_size=2)
    r = StreamingRecognizer(model, options, num_mel_bins=20, endpoint_rules=None)
    noise = 0.1 * torch.randn(int(16000 * seconds), generator=torch.Generator().manual_seed(seed))
    r.accept_waveform(noise)
    r.add_waveform(0.1 * torch.randn(16000, generator=torch.Generator().manual_seed(seed + 100)))
    return r


@pytest.mark.parametrize("name", sorted(ENCODERS))
@pytest.mark.parametrize("left", [-1, 2])
@torch.inference_mode()
def test_a_batch_of_streams_at_different_positions_equals_each_alone(name, left):
    model = model_of(name)
    # 0, 0.5 s and 1.5 s in (chunks of 4 encoder frames = 0.16 s): offsets 0, 12 and 36 frames
    batched = [recognizer(model, left, s, seed) for seed, s in enumerate((0.0, 0.5, 1.5))]
    alone = [recognizer(model, left, s, seed) for seed, s in enumerate((0.0, 0.5, 1.5))]
    assert len({r.offset for r in batched}) == 3 and batched[0].offset == 0
    for _ in range(3):  # the second and third steps read caches the batch wrote
        windows = [r.next_window() for r in batched]
        outs, _ = encode_chunks(batched, windows)
        for r, a, w, out in zip(batched, alone, windows, outs):
            want, _ = a.encode(a.next_window())
            assert out.shape == want.shape
            assert (out - want).abs().max() < TOLERANCE
            assert r.offset == a.offset
            assert r.att_cache.shape == a.att_cache.shape and (r.att_cache - a.att_cache).abs().max() < TOLERANCE
            assert r.cnn_cache.shape == a.cnn_cache.shape
            if a.cnn_cache.numel():
                assert (r.cnn_cache - a.cnn_cache).abs().max() < TOLERANCE
            r.advance(w, out)
            a.advance(a.next_window(), want)
    if left >= 0:
        assert batched[2].att_cache.size(2) == 4 * left  # (the stream far in kept its left chunks only)


def test_padded_cache_masks_are_each_streams_padded_cache_mask():
    masks = padded_cache_masks(torch.tensor([0, 3, 8, 9]), 8, 4)
    for row, real in zip(masks, (0, 3, 8, 9)):
        assert torch.equal(row[None], padded_cache_mask(real, 8, 4, torch.device("cpu")))


def test_a_batch_refuses_chunks_of_different_lengths():
    model = model_of("conformer rel_pos_xl")
    a, b = recognizer(model, -1, 0.5, 0), recognizer(model, -1, 0.5, 1)
    with pytest.raises(ValueError, match="one length"):
        encode_chunks([a, b], [a.next_window(), b.next_window()[:-1]])
    with pytest.raises(ValueError, match="distinct streams"):
        encode_chunks([a, a], [a.next_window(), a.next_window()])
