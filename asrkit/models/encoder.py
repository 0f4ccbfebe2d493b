"""Encoders: conv2d subsampling + a stack of transformer or conformer blocks.

``forward(feats [B, T, F], feats_lengths [B], chunk_size=0, num_left_chunks=-1)
-> (out [B, T', D], out_lengths [B])``.  Frames ``t >= out_lengths[b]`` of ``out`` are
padding (their values are unspecified).  ``feats`` are the features the encoder reads,
i.e. after CMVN (:meth:`AsrModel.encode <asrkit.models.asr_model.AsrModel.encode>` applies
it; the streaming methods here take normalised features too).  The attention mask is
built once per batch and shared by every block.

Streaming (U2/U2++, as WeNet): ``chunk_size > 0`` masks self-attention to the query's own
chunk of ``chunk_size`` encoder frames and ``num_left_chunks`` chunks before it (all
earlier chunks when < 0).  :meth:`BaseEncoder.forward_chunk` runs one chunk with caches of
the frames before it and :meth:`BaseEncoder.forward_chunk_by_chunk` drives it over an
utterance; the result equals the masked full forward when the convolution module is causal
(or absent).  A centred convolution is not limited by the attention mask (WeNet's
behaviour too): the masked forward of such a model still reads later chunks, and chunk by
chunk gives different numbers.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from asrkit.models.attention import (MultiHeadedAttention, RelPositionMultiHeadedAttention,
                                    XLRelPositionMultiHeadedAttention)
from asrkit.models.embedding import (PositionalEncoding, RelPositionalEncoding, TablePositionalEncoding,
                                    XLRelPositionalEncoding)
from asrkit.models.encoder_layer import ConformerEncoderLayer, TransformerEncoderLayer
from asrkit.models.layers import ConvolutionModule, PositionwiseFeedForward
from asrkit.models.mask import chunk_attention_mask, padded_cache_mask, valid_mask
from asrkit.models.schema import EncoderConf
from asrkit.models.subsampling import build_subsampling


# pos_enc_layer_type -> its encoding module, and the self-attention that reads its output
POSITIONAL_ENCODINGS: dict[str, type[nn.Module]] = {
    "abs_pos": PositionalEncoding,
    "rel_pos": RelPositionalEncoding,        # WeNet's: absolute table rows, no shift
    "rel_pos_xl": XLRelPositionalEncoding,   # Transformer-XL's: 2T-1 distances, shifted
    "abs_pos_whisper": TablePositionalEncoding,  # Whisper's: its sinusoid table (a buffer), unscaled
}
POSITIONAL_ATTENTION: dict[str, type[MultiHeadedAttention]] = {
    "rel_pos": RelPositionMultiHeadedAttention,
    "rel_pos_xl": XLRelPositionMultiHeadedAttention,
}


def cache_keep_from(keys: int, required_cache_size: int) -> int:
    """The first of a chunk's ``keys`` attention rows (cache then chunk) kept as the new cache:
    ``required_cache_size`` < 0 all, 0 none, else the last ``required_cache_size``."""
    if required_cache_size < 0:
        return 0
    return max(keys - required_cache_size, 0)


class BaseEncoder(nn.Module):
    """Shared front end, block loop and final LayerNorm (pre-norm only)."""

    # encoder-type defaults for the keys whose WeNet default depends on the encoder
    default_activation = "relu"
    default_pos_enc = "abs_pos"
    default_attention = "selfattn"
    default_num_blocks = 6  # WeNet's, when encoder_conf.num_blocks is not given

    def __init__(self, input_dim: int, conf: EncoderConf):
        super().__init__()
        self._output_size = conf.output_size
        self.attention_heads = conf.attention_heads
        self.activation_type: str = conf.activation_type or self.default_activation
        self.pos_enc_type: str = conf.pos_enc_layer_type or self.default_pos_enc
        self.attention_type: str = conf.selfattention_layer_type or self.default_attention
        if self.attention_type == "rel_selfattn" and self.pos_enc_type not in POSITIONAL_ATTENTION:
            raise ValueError("selfattention_layer_type rel_selfattn needs pos_enc_layer_type rel_pos or rel_pos_xl")
        d = conf.output_size
        self.normalize_before = self.pre_norm(conf)
        pos_enc = POSITIONAL_ENCODINGS[self.pos_enc_type](d, conf.positional_dropout_rate)
        self.embed = build_subsampling(conf.input_layer, input_dim, d, pos_enc)
        self.encoders = nn.ModuleList([self.build_layer(conf, i) for i in range(self.blocks(conf))])
        self.after_norm: Optional[nn.LayerNorm] = nn.LayerNorm(d, eps=1e-5) if self.normalize_before else None

    @classmethod
    def blocks(cls, conf: EncoderConf) -> int:
        """``encoder_conf.num_blocks``, or the encoder's default when not given."""
        return cls.default_num_blocks if conf.num_blocks is None else conf.num_blocks

    def pre_norm(self, conf: EncoderConf) -> bool:
        """Whether the blocks are pre-norm and the encoder ends with a LayerNorm
        (``encoder_conf.normalize_before``, true when not given; an encoder without that key
        overrides this)."""
        return True if conf.normalize_before is None else conf.normalize_before

    def build_self_attention(self, conf: EncoderConf) -> MultiHeadedAttention:
        cls = (POSITIONAL_ATTENTION[self.pos_enc_type] if self.attention_type == "rel_selfattn"
               else MultiHeadedAttention)
        dropout = 0.0 if conf.attention_dropout_rate is None else conf.attention_dropout_rate
        return cls(conf.attention_heads, conf.output_size, dropout, conf.key_bias)

    def build_feed_forward(self, conf: EncoderConf) -> PositionwiseFeedForward:
        return PositionwiseFeedForward(conf.output_size, conf.linear_units, conf.dropout_rate,
                                       self.activation_type)

    def build_layer(self, conf: EncoderConf, index: int) -> nn.Module:
        """Block ``index`` (0-based) of the stack."""
        raise NotImplementedError(f"{type(self).__name__} must define build_layer")

    def output_size(self) -> int:
        return self._output_size

    @property
    def subsampling_rate(self) -> int:
        return self.embed.rate

    @property
    def min_input_length(self) -> int:
        """Shortest input (frames) that yields at least one output frame."""
        return self.embed.min_input_length

    def host_output_lengths(self, feats_lengths: torch.Tensor) -> Optional[torch.Tensor]:
        """The output lengths :meth:`forward` gives for ``feats_lengths``, computed where
        ``feats_lengths`` is (the host's copy: ``asrkit.models.ctc.host_lengths``); None for
        an encoder whose own ``forward`` changes the lengths otherwise (a subclass's)."""
        if type(self).forward is not BaseEncoder.forward or not hasattr(self.embed, "output_lengths"):
            return None
        return self.embed.output_lengths(feats_lengths)

    def check_input_lengths(self, feats_lengths: torch.Tensor) -> None:
        """ValueError when an utterance of ``feats_lengths`` is shorter than the subsampling
        needs (``min_input_length`` frames)."""
        if feats_lengths.numel() > 0 and int(feats_lengths.min()) < self.embed.min_input_length:
            raise ValueError(f"an utterance has {int(feats_lengths.min())} frames; the "
                             f"{self.embed.rate}x subsampling needs at least "
                             f"{self.embed.min_input_length} (filter short utterances)")

    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor, chunk_size: int = 0,
                num_left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """``feats [B, T, F]`` (after CMVN), ``feats_lengths [B]`` -> ``(out [B, T', D],
        out_lengths [B])``.  ``chunk_size <= 0``: full context.  ``chunk_size > 0``: the
        masked full forward of a streaming model, self-attention limited by
        :func:`~asrkit.models.mask.chunk_attention_mask` (chunks of ``chunk_size`` encoder
        frames, ``num_left_chunks`` left chunks, all when < 0): WeNet's
        ``encoder(feats, lens, decoding_chunk_size, num_decoding_left_chunks)``."""
        if feats.dim() != 3:
            raise ValueError(f"encoder input must be [B, T, F], got shape {feats.shape}")
        if feats_lengths.device.type == "cpu":  # (on a GPU the trainer checks the host's copy: no sync)
            self.check_input_lengths(feats_lengths)
        x, pos_emb, lengths = self.embed(feats, feats_lengths)
        valid = valid_mask(lengths, x.size(1)).unsqueeze(1)  # [B, 1, T']
        mask = chunk_attention_mask(valid, chunk_size, num_left_chunks)  # [B, 1|T', T']
        for layer in self.encoders:
            x = layer(x, mask, pos_emb, valid)
        if self.after_norm is not None:
            x = self.after_norm(x)
        return x, lengths

    @torch.jit.export
    def forward_chunk(self, xs: torch.Tensor, offset: int, required_cache_size: int,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor,
                      att_mask: Optional[torch.Tensor] = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk of a stream (WeNet's ``forward_chunk``, same shapes).

        ``xs [1, T_in, F]``: the chunk's input features after CMVN, the
        ``(chunk − 1)·rate + right_context + 1`` frames whose subsampling gives the
        chunk's ``T`` encoder frames (consecutive chunks overlap by
        ``right_context + 1 − rate`` input frames; no subsampling cache).
        ``offset``: the encoder-frame index of the chunk's first frame (encoder frames of
        the stream before it).  ``att_cache [num_blocks, H, C, 2·d_k]``: per block the
        self-attention keys then values of the ``C`` frames before the chunk (the frames
        ``offset − C .. offset − 1``); ``cnn_cache [num_blocks, 1, D, kernel − 1]``: per
        block the causal convolution's inputs of the last ``kernel − 1`` frames.  Empty
        tensors (e.g. ``torch.zeros(0, 0, 0, 0)``) at the start of a stream; a zero
        ``cnn_cache`` is also the start (WeNet's zero left padding).  ``att_mask
        [1, 1, C + T]`` bool over the cached rows then the chunk, ``None`` = all allowed;
        with a fixed-size zero-padded cache it must exclude the padding rows
        (:func:`~asrkit.models.mask.padded_cache_mask`), whose positions
        ``offset − C + r`` may be negative.

        ``required_cache_size``: frames of attention cache to return (< 0: all, 0: none).
        Returns ``(ys [1, T, D], new_att_cache [num_blocks, H, C', 2·d_k] with
        C' = min(C + T, required_cache_size)`` (all ``C + T`` when < 0) ``, new_cnn_cache
        [num_blocks, 1, D, kernel − 1]`` (``[num_blocks, 1, D, 0]`` without a causal
        convolution)).  The caller advances ``offset`` by ``T``."""
        if xs.dim() != 3 or xs.size(0) != 1:
            raise ValueError(f"forward_chunk takes one chunk [1, T, F], got shape {xs.shape}")
        x, _, _ = self.embed(xs, torch.full([1], xs.size(1), dtype=torch.long, device=xs.device), offset)
        cache_frames = att_cache.size(2) if att_cache.size(0) > 0 else 0
        keys = cache_frames + x.size(1)
        pos_emb = self.embed.pos_enc.chunk_table(offset, cache_frames, x.size(1)).to(x.dtype)
        keep_from = cache_keep_from(keys, required_cache_size)
        x, new_att, new_cnn = self.chunk_layers(x, att_mask, pos_emb, att_cache.unsqueeze(1), cnn_cache)
        return x, new_att.squeeze(1)[:, :, keep_from:], new_cnn

    def chunk_layers(self, x: torch.Tensor, att_mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                     att_cache: torch.Tensor, cnn_cache: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The blocks and the final norm over the embedded chunks ``x [N, T, D]`` of ``N``
        streams (``N = 1``: :meth:`forward_chunk`; mask and ``pos_emb`` as there, with ``N``
        rows).  ``att_cache [num_blocks, N, H, C, 2·d_k]`` (any empty tensor: none),
        ``cnn_cache [num_blocks, N, D, kernel − 1]``.  Returns ``(ys [N, T, D],
        att [num_blocks, N, H, C + T, 2·d_k]`` (untrimmed: the cache rows and the chunk's)``,
        new_cnn_cache [num_blocks, N, D, kernel − 1])``."""
        new_att: list[torch.Tensor] = []
        new_cnn: list[torch.Tensor] = []
        none = x.new_zeros([0, 0, 0, 0])
        for i, layer in enumerate(self.encoders):
            layer_att = att_cache[i] if att_cache.size(0) > 0 else none
            layer_cnn = cnn_cache[i] if cnn_cache.size(0) > 0 else cnn_cache
            x, att, cnn = layer.forward_chunk(x, att_mask, pos_emb, layer_att, layer_cnn)
            new_att.append(att)
            new_cnn.append(cnn)
        if self.after_norm is not None:
            x = self.after_norm(x)
        return x, torch.stack(new_att), torch.stack(new_cnn)

    @torch.jit.unused
    def forward_chunks(self, xs: torch.Tensor, starts: torch.Tensor, att_cache: torch.Tensor,
                       cnn_cache: torch.Tensor, att_mask: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next chunk of each of ``N`` streams in one forward, every stream at its own
        position: ``xs [N, T_in, F]`` (after CMVN; the same ``T_in`` for all, as in
        :meth:`forward_chunk`), ``starts`` int64 ``[N]`` (each chunk's first encoder frame in
        its stream: per stream, the absolute and WeNet's relative encodings read it; the
        Transformer-XL encoding does not), ``att_cache [num_blocks, N, H, C, 2·d_k]`` a fixed
        ``C`` rows for all (a stream with fewer cached frames has them last, after zero
        padding), ``cnn_cache [num_blocks, N, D, kernel − 1]`` (zeros: a stream's start),
        ``att_mask [N, 1, C + T]`` excluding each stream's padding rows
        (:func:`~asrkit.models.mask.padded_cache_masks`).  Returns ``(ys [N, T, D], att
        [num_blocks, N, H, C + T, 2·d_k]`` untrimmed ``, cnn [num_blocks, N, D, kernel − 1])``;
        row ``n`` has :meth:`forward_chunk`'s numbers for stream ``n`` alone (to float
        rounding).  :meth:`forward_chunk_at` is its ``N = 1`` form."""
        x = self.embed.subsample(xs)
        x, pos_emb = self.embed.pos_enc.chunk_at(x, starts, att_cache.size(3))
        return self.chunk_layers(x, att_mask, pos_emb, att_cache, cnn_cache)

    @torch.jit.unused
    def forward_chunk_at(self, xs: torch.Tensor, start: torch.Tensor, att_cache: torch.Tensor,
                         cnn_cache: torch.Tensor, att_mask: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`forward_chunk` in the form an ONNX trace keeps general (the streaming
        export, :mod:`asrkit.export.onnx_graphs`): the chunk's position ``start`` (int64
        ``[1]``, the encoder-frame index of its first frame) is a tensor, the attention
        cache (``[num_blocks, H, C, 2·d_k]``, WeNet's layout) has a fixed ``C >= 1`` rows (zero
        padding at a stream's start, excluded by ``att_mask [1, 1, C + T]``) and is returned
        untrimmed (``C + T`` rows: the caller keeps the last ``C``).  Same numbers as
        :meth:`forward_chunk` with ``offset = start``: :meth:`forward_chunks` of one stream."""
        ys, att, cnn = self.forward_chunks(xs, start, att_cache.unsqueeze(1), cnn_cache, att_mask)
        return ys, att.squeeze(1), cnn

    def forward_chunk_by_chunk(self, xs: torch.Tensor, decoding_chunk_size: int,
                               num_decoding_left_chunks: int = -1, fixed_cache: bool = False
                               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run a whole utterance ``xs [1, T, F]`` (after CMVN) through
        :meth:`forward_chunk`, ``decoding_chunk_size`` encoder frames at a time, keeping
        ``num_decoding_left_chunks`` chunks of attention cache (all when < 0), as WeNet's
        ``forward_chunk_by_chunk``: windows of ``(chunk − 1)·rate + right_context + 1``
        input frames every ``chunk·rate`` frames, the last one cut at the end.  Returns
        ``(out [1, T', D], out_lengths [1])``, equal to :meth:`forward` with the same
        chunk and left chunks for a causal (or absent) convolution.

        ``fixed_cache``: instead of a growing attention cache, a fixed one of
        ``R = chunk · left`` rows (``num_decoding_left_chunks >= 0``), zero at the start
        and masked by :func:`~asrkit.models.mask.padded_cache_mask` until filled -- the
        fixed-shape protocol an exported streaming model uses; same result."""
        if decoding_chunk_size <= 0:
            raise ValueError(f"decoding_chunk_size must be > 0, got {decoding_chunk_size}")
        if xs.dim() != 3 or xs.size(0) != 1:
            raise ValueError(f"forward_chunk_by_chunk takes one utterance [1, T, F], got {xs.shape}")
        if xs.size(1) < self.embed.min_input_length:
            raise ValueError(f"the utterance has {xs.size(1)} frames; the {self.embed.rate}x subsampling "
                             f"needs at least {self.embed.min_input_length}")
        rate = self.embed.rate
        context = self.embed.right_context + 1
        stride = rate * decoding_chunk_size
        window = (decoding_chunk_size - 1) * rate + context
        required = decoding_chunk_size * num_decoding_left_chunks if num_decoding_left_chunks >= 0 else -1
        if fixed_cache and required < 0:
            raise ValueError("fixed_cache needs num_decoding_left_chunks >= 0 (a bounded cache)")
        att_cache = torch.zeros([0, 0, 0, 0], dtype=xs.dtype, device=xs.device)
        cnn_cache = torch.zeros([0, 0, 0, 0], dtype=xs.dtype, device=xs.device)
        if fixed_cache:
            att_cache = torch.zeros([len(self.encoders), self.attention_heads, required,
                                     2 * (self._output_size // self.attention_heads)],
                                    dtype=xs.dtype, device=xs.device)
        outputs: list[torch.Tensor] = []
        offset = 0
        for start in range(0, xs.size(1) - context + 1, stride):
            chunk = xs[:, start:min(start + window, xs.size(1))]
            mask: Optional[torch.Tensor] = None
            if fixed_cache:
                frames = int(self.embed.output_lengths(torch.full([1], chunk.size(1), dtype=torch.long))[0])
                mask = padded_cache_mask(offset, required, frames, xs.device)
            y, att_cache, cnn_cache = self.forward_chunk(chunk, offset, required, att_cache, cnn_cache, mask)
            outputs.append(y)
            offset += y.size(1)
        out = torch.cat(outputs, dim=1)
        return out, torch.full([1], out.size(1), dtype=torch.long, device=xs.device)


class TransformerEncoder(BaseEncoder):
    """Transformer encoder (defaults: relu, absolute positions, plain self-attention)."""

    def build_layer(self, conf: EncoderConf, index: int) -> nn.Module:
        return TransformerEncoderLayer(conf.output_size, self.build_self_attention(conf),
                                       self.build_feed_forward(conf), conf.dropout_rate,
                                       self.normalize_before)


class ConformerEncoder(BaseEncoder):
    """Conformer encoder (defaults: swish, relative positions, rel-pos self-attention,
    macaron FFN, conv module)."""

    default_activation = "swish"
    default_pos_enc = "rel_pos"
    default_attention = "rel_selfattn"

    def build_layer(self, conf: EncoderConf, index: int) -> nn.Module:
        macaron = self.build_feed_forward(conf) if conf.macaron_style else None
        kernel = 15 if conf.cnn_module_kernel is None else conf.cnn_module_kernel
        conv = (ConvolutionModule(conf.output_size, kernel, conf.cnn_module_norm,
                                  self.activation_type, causal=conf.causal)
                if conf.use_cnn_module else None)
        return ConformerEncoderLayer(conf.output_size, self.build_self_attention(conf),
                                     self.build_feed_forward(conf), macaron, conv,
                                     conf.dropout_rate, self.normalize_before)


class MultiRateEncoder(BaseEncoder):
    """Base of the encoders whose blocks run at different frame rates (``squeezeformer``,
    ``efficientConformer``): they stream with a growing attention cache only (their own
    ``forward_chunk``); ``wenet_name`` names them in errors."""

    wenet_name = ""

    @torch.jit.unused
    def forward_chunks(self, xs: torch.Tensor, starts: torch.Tensor, att_cache: torch.Tensor,
                       cnn_cache: torch.Tensor, att_mask: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Not implemented: several streams in one forward need one fixed cache shape per block."""
        raise ValueError(f"encoder {self.wenet_name} does not run several streams in one forward (fixed-size "
                         f"caches are not implemented: its blocks run at different frame rates)")
