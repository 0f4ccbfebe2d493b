"""The two graphs asrkit exports to ONNX, in the layout sherpa-onnx's WeNet CTC loaders
read (``offline-wenet-ctc-model.cc``, ``online-wenet-ctc-model.cc``).  sherpa-onnx feeds
inputs and reads outputs **by position**; the names are WeNet's for readability.

Both take raw Kaldi fbank (``[1, T, num_mel_bins]``, 16-bit sample scale) and apply the
model's CMVN inside, as WeNet's exported models do; both return CTC log-posteriors.  They
call the model's own modules (CMVN, :class:`~asrkit.models.encoder.BaseEncoder`, CTC
head): nothing is re-implemented here.

:class:`OfflineCtcGraph`: ``(x [N, T, F] float32, x_lens [N] int64) -> (log_probs
[N, T', V], log_probs_lens [N] int64)``, full context.

:class:`StreamingCtcGraph`, one chunk of one stream, the protocol of sherpa-onnx's
``OnlineWenetCtcModel`` for a recognizer with ``chunk_size`` (encoder frames) and
``num_left_chunks >= 1`` (both are the *recognizer's* arguments, the graph takes any):

==================== ================================= =====================================
input                shape / dtype                     what sherpa-onnx feeds
==================== ================================= =====================================
x                    [1, (chunk−1)·rate + rc + 1, F]   the chunk's fbank frames (67 for
                                                       chunk 16 with 4× subsampling)
offset               [1] int64                         ``R`` + encoder frames decoded so far
required_cache_size  [1] int64                         ``R = chunk · num_left_chunks``
attn_cache           [blocks, H, R, 2·d_k] float32     keys then values of the last ``R``
                                                       frames (zeros at the start)
conv_cache           [blocks, 1, D, kernel−1] float32  causal convolution inputs (zeros)
attn_mask            [1, 1, R + chunk] bool            ``False`` on cache rows not yet filled
==================== ================================= =====================================

outputs: ``log_probs [1, chunk, V]``, ``next_att_cache [blocks, H, R, 2·d_k]`` (exactly the
last ``R`` frames), ``next_conv_cache [blocks, 1, D, kernel−1]``.

sherpa-onnx starts ``offset`` at ``R``, so the chunk's true position (encoder frames
before it) is ``offset − R``; cache row ``r`` holds the frame at ``offset − R − R + r``.
The graph computes positions from that, and also excludes cache rows of negative positions
itself (on top of ``attn_mask``), so ``offset`` and ``required_cache_size`` are real
inputs of every model (sherpa-onnx feeds six inputs whatever the model reads).  A model
without a convolution module passes ``conv_cache`` through unchanged (``kernel − 1 = 0``).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from asrkit.models.cmvn import RawFbankNormalization


class _CtcGraph(nn.Module):
    """CMVN(s), encoder and CTC head of a trained model."""

    def __init__(self, model: nn.Module, feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None):
        super().__init__()
        if model.ctc is None:
            raise ValueError("the model has no CTC head (trained with ctc_weight 0); sherpa-onnx's WeNet "
                             "CTC models are CTC log-posteriors: nothing to export")
        self.normalizer = RawFbankNormalization(model.cmvn, feature_cmvn)
        self.encoder = model.encoder
        self.ctc = model.ctc


class OfflineCtcGraph(_CtcGraph):
    """Full-context CTC log-posteriors of a padded batch (see the module docstring)."""

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        out, lengths = self.encoder(self.normalizer(x), x_lens)
        return self.ctc(out), lengths


class StreamingCtcGraph(_CtcGraph):
    """One chunk of one stream with fixed-size caches (see the module docstring).

    Needs a model whose convolution is causal (or absent): a centred convolution reads
    frames of later chunks, which a stream does not have yet."""

    def __init__(self, model: nn.Module, feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None):
        super().__init__(model, feature_cmvn)
        convs = [layer.conv_module for layer in model.encoder.encoders
                 if getattr(layer, "conv_module", None) is not None]
        if any(not conv.causal for conv in convs):
            raise ValueError("the encoder's convolution is not causal (causal: false): it reads later "
                             "chunks, so the model cannot stream; train with causal: true")
        self.has_conv = bool(convs)

    def forward(self, x: torch.Tensor, offset: torch.Tensor, required_cache_size: torch.Tensor,
                attn_cache: torch.Tensor, conv_cache: torch.Tensor, attn_mask: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        start = offset.reshape(1) - required_cache_size.reshape(1)  # encoder frames before the chunk
        cache_rows = attn_cache.size(2)
        row_positions = start - cache_rows + torch.arange(cache_rows, dtype=start.dtype)
        cache_valid = (row_positions >= 0).view(1, 1, -1) & attn_mask[:, :, :cache_rows]
        mask = torch.cat([cache_valid, attn_mask[:, :, cache_rows:]], dim=-1)
        ys, att, cnn = self.encoder.forward_chunk_at(self.normalizer(x), start, attn_cache, conv_cache, mask)
        next_att_cache = att[:, :, ys.size(1):]
        next_conv_cache = cnn if self.has_conv else conv_cache
        return self.ctc(ys), next_att_cache, next_conv_cache
