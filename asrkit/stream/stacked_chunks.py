"""Several streams' next chunks through the encoder in one forward.

:func:`encode_chunks` is :meth:`StreamingRecognizer.encode
<asrkit.stream.recognizer.StreamingRecognizer.encode>` for ``N`` streams of one model at once:
the streams sit at different positions (one just started, one long into its segment), so
their attention caches differ in length.  They are stacked into one fixed size ``C`` (the
longest), each stream's rows last after zero padding that its mask excludes
(:func:`~asrkit.models.mask.padded_cache_masks`), every stream with its own start (the
encoder-frame index of its chunk) and convolution cache (zeros where the stream starts:
the empty cache's meaning), and run by
:meth:`BaseEncoder.forward_chunks <asrkit.models.encoder.BaseEncoder.forward_chunks>`.  Each
stream gets back its own rows of the output and its caches exactly as running it alone
leaves them (the growing cache, trimmed to its left chunks), so a stream can go on alone or
in another batch.  The outputs equal each stream alone to float rounding
(tests/models/test_encoder_batch.py).

The search and the rest of each stream's decoding stay per stream
(:meth:`StreamingRecognizer.advance <asrkit.stream.recognizer.StreamingRecognizer.advance>`).
"""
from __future__ import annotations

import time
from typing import Sequence

import torch

from asrkit.models.mask import padded_cache_masks


def cached_frames(att_cache: torch.Tensor) -> int:
    """Frames an attention cache holds (an empty tensor: none)."""
    return att_cache.size(2) if att_cache.size(0) > 0 else 0


@torch.inference_mode()
def encode_chunks(recognizers: Sequence, windows: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], float]:
    """Each of ``recognizers`` (:class:`~asrkit.stream.recognizer.StreamingRecognizer` of one
    model, each once) encodes its chunk ``windows[n]`` (its :meth:`next_window`; all of one
    length) in one encoder forward and advances its caches.  Returns ``(outs, seconds)``:
    ``outs[n] [1, T, D]`` what ``recognizers[n].encode(windows[n])`` gives, and the wall time
    of the whole batch.  One recognizer: its own :meth:`encode`."""
    if len(recognizers) != len(windows) or not recognizers:
        raise ValueError(f"{len(recognizers)} recognizers and {len(windows)} windows")
    if len(recognizers) == 1:
        out, seconds = recognizers[0].encode(windows[0])
        return [out], seconds
    start = time.perf_counter()
    if len({w.size(0) for w in windows}) > 1:
        raise ValueError(f"chunks of one batch must be of one length, got {sorted({w.size(0) for w in windows})}")
    if len({id(r.model) for r in recognizers}) > 1 or len({id(r) for r in recognizers}) < len(recognizers):
        raise ValueError("a batch is of distinct streams of one model")
    encoder = recognizers[0].model.encoder
    xs = torch.cat([r.encoder_input(w) for r, w in zip(recognizers, windows)])
    n = xs.size(0)
    frames = [cached_frames(r.att_cache) for r in recognizers]
    rows = max(frames)
    blocks, heads = len(encoder.encoders), encoder.attention_heads
    att = xs.new_zeros([blocks, n, heads, rows, 2 * (encoder.output_size() // heads)])
    cnn = None
    for i, r in enumerate(recognizers):
        if frames[i]:
            att[:, i, :, rows - frames[i]:] = r.att_cache
        if r.cnn_cache.numel() and cnn is None:
            cnn = xs.new_zeros([blocks, n, *r.cnn_cache.shape[2:]])
    if cnn is None:  # (every stream starts: its convolution's zero cache; or no causal convolution)
        cnn = xs.new_zeros([0, 0, 0, 0])
    else:
        for i, r in enumerate(recognizers):
            if r.cnn_cache.numel():
                cnn[:, i] = r.cnn_cache[:, 0]
    starts = torch.tensor([r.offset for r in recognizers], dtype=torch.long)
    chunk = int(encoder.embed.output_lengths(torch.tensor([xs.size(1)]))[0])
    mask = padded_cache_masks(torch.tensor(frames), rows, chunk)
    ys, att, cnn = encoder.forward_chunks(xs, starts, att, cnn, mask)
    outs = []
    for i, r in enumerate(recognizers):
        keep = frames[i] + chunk if r.cache_frames < 0 else min(frames[i] + chunk, r.cache_frames)
        r.set_encoder_state(chunk, att[:, i, :, att.size(3) - keep:].contiguous(), cnn[:, i:i + 1].contiguous())
        outs.append(ys[i:i + 1])
    return outs, time.perf_counter() - start
