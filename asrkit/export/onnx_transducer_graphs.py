"""The graphs a transducer is exported as for sherpa-onnx's transducer recognizers
(``OfflineRecognizer.from_transducer``, ``OnlineRecognizer.from_transducer``): an encoder,
a decoder (the predictor) and a joiner, in the layout of icefall's exports that
sherpa-onnx reads (``offline-transducer-model.cc``, ``online-conformer-transducer-model.cc``).
sherpa-onnx feeds inputs and reads outputs **by position**; the names are icefall's.

sherpa-onnx joins **projected** vectors: the encoder graphs end with the joint's encoder
projection (``enc_ffn``) and the decoder graph with its predictor projection
(``pred_ffn``), so the joiner only adds them and applies the rest of the joint.  Every
graph calls the model's own modules (CMVN, encoder layers, predictor, joint); nothing is
re-implemented here.

=========================== ============================================ ==========================
graph                       inputs                                       outputs
=========================== ============================================ ==========================
:class:`OfflineEncoder`     ``x [N, T, F]`` fbank, ``x_lens [N]`` int64  ``encoder_out [N, T', J]``,
                                                                         ``encoder_out_lens [N]``
:class:`StreamingEncoder`   ``x [N, T_win, F]``, ``attn_cache``          ``encoder_out [N, chunk, J]``,
                            ``[L, R, N, D]``, ``conv_cache``             ``next_attn_cache``,
                            ``[L, kernel − 1, N, D]``,                   ``next_conv_cache``
                            ``processed_frames [N]`` int64
:class:`Decoder`            ``y [N, context_size]`` int64                ``decoder_out [N, J]``
:class:`Joiner`             ``encoder_out [N, J]``, ``decoder_out        ``logit [N, V]`` (raw)
                            [N, J]``
=========================== ============================================ ==========================

**The decoder's context.**  sherpa-onnx starts every hypothesis with the context
``[-1, …, -1, 0]`` (``0``: the blank) and then feeds the last ``context_size`` tokens.  A
stateless predictor (``embedding`` or ``conv``, WeNet's) reads the embeddings of the last
``context_size`` tokens, and before the first token its history is ``history_size``
**zero vectors**: so ``−1`` is mapped to the zero vector (not to an embedding), and
``[-1, 0]`` is exactly the predictor's first step from its initial state.  An ``rnn``
predictor has a recurrent state, not a token window: it cannot be written in this layout.

**The streaming encoder's caches.**  sherpa-onnx's online ``conformer`` model keeps, per
stream, ``attn_cache [L, left_context, N, encoder_dim]`` and ``conv_cache [L,
cnn_module_kernel − 1, N, encoder_dim]`` (zeros at the start, stacked over streams on
axis 2, fed back as returned; ``online-conformer-transducer-model.cc``), and feeds windows
of ``T`` feature frames every ``decode_chunk_len`` frames with ``processed_frames``, the
feature frames before the window.  A U2++ layer attends from its chunk to the ``R`` encoder
frames before it (``R = num_left_chunks · chunk``); WeNet's ``forward_chunk`` caches their
keys and values (``[H, R, 2·d_k]``, ``2·D`` numbers a frame).  Here each layer caches what
its attention reads them from, the layer-normed frames (``D`` numbers a frame, icefall's
choice), and recomputes their keys and values with its own projections
(:class:`InputCachingAttention`): the same keys and values, in ``[L, R, N, D]`` exactly.
The keys carry no position: ``rel_pos`` scores key ``j`` against the positional row of its
absolute position, which the graph computes from ``processed_frames`` (chunk start =
``processed_frames / rate``; ``rel_pos_xl`` needs distances only), and cache rows of
negative positions (a stream's first chunks, still zeros) are masked out.  The causal
convolution's cache is its inputs of the last ``kernel − 1`` frames (``[N, D, kernel − 1]``
per layer in asrkit, ``[kernel − 1, N, D]`` here).
"""
from __future__ import annotations

import copy
import math
from typing import Optional, Tuple

import torch
from torch import nn

from asrkit.models.cmvn import RawFbankNormalization
from asrkit.models.transducer.model import Transducer
from asrkit.models.transducer.predictor import RNNPredictor


class FbankAdapter(nn.Module):
    """What the exported encoder reads -> what training read: ``x + 2·ln(train_scale /
    input_scale)`` (the log power of samples scaled by ``s`` moves by ``2·ln s``; exact
    wherever neither side sits at the energy floor), then the model's CMVN."""

    def __init__(self, normalizer: RawFbankNormalization, log_shift: float):
        super().__init__()
        self.normalizer = normalizer
        self.log_shift = float(log_shift)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.log_shift != 0.0:
            x = x + self.log_shift
        return self.normalizer(x)


def log_shift(train_scale: float, input_scale: float) -> float:
    return 2.0 * math.log(float(train_scale) / float(input_scale))


def refuse_stateful_predictor(model: nn.Module) -> None:
    """``ValueError`` (one line) unless the predictor is stateless (``embedding``, ``conv``)."""
    if not isinstance(model, Transducer):
        raise ValueError("not a transducer (model: transducer): nothing for sherpa-onnx's transducer layout")
    if isinstance(model.predictor, RNNPredictor):
        raise ValueError("predictor: rnn cannot be exported for sherpa-onnx: its state is a recurrent hidden "
                         "state, not a fixed context of tokens, and sherpa-onnx's transducer decoder is "
                         "fed only the last context_size tokens; train a stateless predictor (embedding or conv)")
    if not hasattr(model.predictor, "context_size"):
        raise ValueError(f"predictor {type(model.predictor).__name__} has no fixed token context: sherpa-onnx's "
                         f"transducer decoder cannot hold it")


class OfflineEncoder(nn.Module):
    """Full-context encoder of a padded batch, through the joint's encoder projection."""

    def __init__(self, model: nn.Module, adapter: FbankAdapter):
        super().__init__()
        self.adapter = adapter
        self.encoder = model.encoder
        self.joint = model.joint

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        out, lengths = self.encoder(self.adapter(x), x_lens)
        return self.joint.project_encoder(out), lengths


class InputCachingAttention(nn.Module):
    """A layer's self-attention whose streaming cache is its **inputs** (``[N, R, D]``, the
    layer-normed frames it attends from) instead of their keys and values: the keys and
    values of the cached frames are recomputed with the attention's own ``linear_k`` /
    ``linear_v`` (the same numbers the layer cached before), then the attention's own
    :meth:`forward_chunk` runs.  The new cache is the inputs of the cached frames and the
    chunk (``[N, R + T, D]``; the caller keeps the last ``R``)."""

    def __init__(self, attention: nn.Module):
        super().__init__()
        self.attention = attention

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      cache: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        a = self.attention
        keys_values = torch.cat([a.split_heads(a.linear_k(cache)), a.split_heads(a.linear_v(cache))], dim=-1)
        out, _ = a.forward_chunk(x, mask, pos_emb, keys_values)
        return out, torch.cat([cache, x], dim=1)


class StreamingEncoder(nn.Module):
    """One window of each of ``N`` streams (module docstring): ``chunk`` encoder frames
    from ``(chunk − 1)·rate + right_context + 1`` feature frames, ``R = left_context``
    frames of attention cache.  Needs a causal convolution (or none).  Works on its own
    copy of the encoder, whose attentions cache their inputs (:class:`InputCachingAttention`)."""

    def __init__(self, model: nn.Module, adapter: FbankAdapter, chunk: int, left_context: int):
        super().__init__()
        convs = [layer.conv_module for layer in model.encoder.encoders
                 if getattr(layer, "conv_module", None) is not None]
        if any(not conv.causal for conv in convs):
            raise ValueError("the encoder's convolution is not causal (causal: false): it reads later chunks, so "
                             "the model cannot stream; train with causal: true")
        if left_context < 1:
            raise ValueError(f"sherpa-onnx's conformer layout needs a left context of >= 1 frame, got {left_context}")
        self.adapter = adapter
        self.encoder = copy.deepcopy(model.encoder)
        for layer in self.encoder.encoders:
            layer.self_attn = InputCachingAttention(layer.self_attn)
        self.joint = model.joint
        self.chunk = int(chunk)
        self.left_context = int(left_context)
        self.rate = int(self.encoder.embed.rate)
        self.has_conv = bool(convs)

    def forward(self, x: torch.Tensor, attn_cache: torch.Tensor, conv_cache: torch.Tensor,
                processed_frames: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, r = x.size(0), self.left_context
        start = torch.div(processed_frames.reshape(-1), self.rate, rounding_mode="floor")  # [N] encoder frames
        xs = self.encoder.embed.subsample(self.adapter(x))
        xs, pos_emb = self.encoder.embed.pos_enc.chunk_at(xs, start, r)
        rows = start.view(-1, 1) - r + torch.arange(r, dtype=start.dtype)  # positions of the cache rows
        mask = torch.cat([rows >= 0, torch.ones(n, xs.size(1), dtype=torch.bool)], dim=1).unsqueeze(1)
        next_attn, next_conv = [], []
        for i, layer in enumerate(self.encoder.encoders):
            att = attn_cache[i].transpose(0, 1)       # [N, R, D]
            cnn = conv_cache[i].permute(1, 2, 0)      # [N, D, kernel − 1]
            xs, att, new_cnn = layer.forward_chunk(xs, mask, pos_emb, att, cnn)
            next_attn.append(att[:, -r:].transpose(0, 1))
            next_conv.append(new_cnn.permute(2, 0, 1) if self.has_conv else conv_cache[i])
        if self.encoder.after_norm is not None:
            xs = self.encoder.after_norm(xs)
        return self.joint.project_encoder(xs), torch.stack(next_attn), torch.stack(next_conv)


class Decoder(nn.Module):
    """The stateless predictor over the last ``context_size`` tokens (−1: the zero history),
    through the joint's predictor projection."""

    def __init__(self, model: nn.Module):
        super().__init__()
        refuse_stateful_predictor(model)
        self.predictor = model.predictor
        self.joint = model.joint

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        real = (y >= 0).unsqueeze(-1)
        window = self.predictor.embed(y.clamp(min=0)) * real.to(self.predictor.embed.weight.dtype)  # [N, C, E]
        out = self.predictor.mix(window.unsqueeze(1))                                                # [N, 1, P]
        return self.joint.project_predictor(out.squeeze(1))


class Joiner(nn.Module):
    """The joint after its input projections: ``[N, J] + [N, J] -> logits [N, V]``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.joint = model.joint

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
        n = encoder_out.size(0)
        logits = self.joint(encoder_out.view(n, 1, 1, -1), decoder_out.view(n, 1, 1, -1), pre_project=False)
        return logits.reshape(n, -1)


def graphs(model: nn.Module, feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]], shift: float
           ) -> Tuple[FbankAdapter, Decoder, Joiner]:
    """The adapter (CMVN and scale shift) the encoders share, the decoder and the joiner."""
    return FbankAdapter(RawFbankNormalization(model.cmvn, feature_cmvn), shift), Decoder(model), Joiner(model)
