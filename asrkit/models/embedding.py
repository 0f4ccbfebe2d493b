"""Positional encodings: sinusoidal absolute (``abs_pos``), WeNet's relative form
(``rel_pos``), Transformer-XL's relative form (``rel_pos_xl``), and Whisper's two: the
encoder's sinusoid table added unscaled (``abs_pos_whisper``) and the decoder's learned
table (``embed_learnable_pe``)."""
from __future__ import annotations

import math

import torch
from torch import nn

from asrkit.models.layers import Dropout


def sinusoid_table(positions: torch.Tensor, d_model: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``[len(positions), d_model]``: even columns ``sin(p / 10000^(2i/d))``,
    odd columns ``cos(p / 10000^(2i/d))``, for each (possibly negative) position ``p``,
    computed in ``dtype`` (float32, as WeNet computes it; float64 for the exact values)."""
    if d_model % 2:
        raise ValueError(f"positional encoding needs an even dimension, got {d_model}")
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=dtype) * (-math.log(10000.0) / d_model))
    angles = positions.to(dtype).unsqueeze(1) * inv_freq.unsqueeze(0)
    # [N, d/2, 2] -> [N, d]: sin and cos interleaved; no in-place writes, so an ONNX trace
    # computes the rows in the graph for any (dynamic) positions
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(1)


class PositionalEncoding(nn.Module):
    """Absolute encoding: ``x · sqrt(d_model) + PE[offset : offset + T]``, then dropout.
    ``forward`` returns ``(x, PE[offset : offset + T])`` (the table slice is unused by
    absolute attention but keeps one signature for every encoding).  ``PE`` is the
    sinusoid table of :func:`sinusoid_table` over positions ``0 .. max_len − 1``, grown
    when a longer input comes (WeNet's fixed 5000-row table holds the same values)."""

    def __init__(self, d_model: int, dropout_rate: float, max_len: int = 5000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self.dropout = Dropout(dropout_rate)
        self.register_buffer("pe", sinusoid_table(torch.arange(max_len), d_model).unsqueeze(0), persistent=False)

    def _table(self, length: int) -> torch.Tensor:
        if torch.jit.is_tracing():  # ONNX export: rows computed in the graph, no length limit
            return sinusoid_table(torch.arange(length), self.d_model).unsqueeze(0)
        if length > self.pe.size(1):
            self.pe = sinusoid_table(torch.arange(length), self.d_model).unsqueeze(0).to(self.pe.device)
        return self.pe[:, :length]

    def forward(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        pos = self._table(offset + x.size(1))[:, offset:].to(x.dtype)
        return self.dropout(x * self.xscale + pos), pos

    def key_rows(self, offset: int, cache_frames: int, chunk_frames: int) -> torch.Tensor:
        """``[1, cache_frames + chunk_frames, d_model]``: ``PE`` rows of the absolute
        positions ``offset − cache_frames .. offset + chunk_frames − 1`` (a chunk starting
        at encoder frame ``offset`` and the cached frames before it); rows of negative
        positions are zeros (they can only be rows of a zero-padded cache, which the
        attention mask must exclude)."""
        start = offset - cache_frames
        table = self._table(offset + chunk_frames)[:, max(start, 0):]
        if start < 0:
            table = torch.cat([table.new_zeros([1, -start, self.d_model]), table], dim=1)
        return table

    def chunk_table(self, offset: int, cache_frames: int, chunk_frames: int) -> torch.Tensor:
        """The ``pos_emb`` of a chunk's keys for attention (see :meth:`key_rows`); plain
        self-attention ignores it."""
        return self.key_rows(offset, cache_frames, chunk_frames)

    @torch.jit.unused
    def chunk_at(self, x: torch.Tensor, start: torch.Tensor, cache_frames: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ONNX-export form of a chunk's encoding, the chunk's position being a tensor
        (a graph input): ``x [N, T, D]`` (subsampled, before scaling), ``start`` int64
        ``[N]`` the encoder-frame position of each stream's first frame.  Returns ``(x · sqrt(d) +
        PE(start .. start+T−1), key rows)`` where the key rows are ``PE`` of the positions
        ``start − cache_frames .. start + T − 1`` computed in the graph (rows of negative
        positions belong to cache padding, which the mask excludes) -- what
        ``forward(x, offset)`` and :meth:`chunk_table` give for ``offset = start``."""
        rows = self.rows_at(start, cache_frames, x.size(1)).to(x.dtype)
        return self.dropout(x * self.xscale + rows[:, cache_frames:]), rows

    @torch.jit.unused
    def rows_at(self, start: torch.Tensor, cache_frames: int, chunk_frames: int) -> torch.Tensor:
        """``[N, cache_frames + chunk_frames, d_model]``: sinusoid rows of the positions
        ``start − cache_frames .. start + chunk_frames − 1`` for each of ``start [N]`` (a
        tensor: one stream per row, e.g. sherpa-onnx's batch of streams)."""
        positions = start.reshape(-1, 1) + torch.arange(-cache_frames, chunk_frames, dtype=start.dtype)
        rows = sinusoid_table(positions.reshape(-1), self.d_model)
        return rows.view(positions.size(0), positions.size(1), self.d_model)


def whisper_sinusoids(length: int, channels: int) -> torch.Tensor:
    """``[length, channels]``, Whisper's encoder table (``whisper.model.sinusoids``): row
    ``p`` is ``sin(p · f_i)`` for ``i = 0 .. channels/2 − 1`` then ``cos(p · f_i)``, with
    ``f_i = exp(−i · ln(10000) / (channels/2 − 1))`` (halves, not interleaved; the last
    frequency is exactly 1/10000), computed in float32 as Whisper does."""
    if channels % 2 or channels < 4:
        raise ValueError(f"Whisper's positional table needs an even dimension >= 4, got {channels}")
    increment = math.log(10000) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class TablePositionalEncoding(PositionalEncoding):
    """Whisper's encodings: ``x + PE[offset : offset + T]`` (no ``sqrt(d)`` scaling), then
    dropout, where ``PE`` is a stored ``[1, max_len, d_model]`` table (state-dict key
    ``pe``, WeNet's name): ``forward`` returns ``(x, PE[offset : offset + T])`` as
    :class:`PositionalEncoding` does.  A position ``>= max_len`` is an error (the table
    is not grown: Whisper's model has no positions beyond it).

    ``learnable=False`` (``abs_pos_whisper``, WeNet's ``WhisperPositionalEncoding``, the
    encoder's; ``max_len`` 1500): a persistent buffer initialised to
    :func:`whisper_sinusoids` (a checkpoint's own table is loaded into it, as OpenAI's files
    and WeNet's store one).  ``learnable=True`` (``embed_learnable_pe``, WeNet's
    ``LearnablePositionalEncoding``, the decoder's; ``max_len`` 448): a parameter,
    initialised from ``N(0, 0.02²)`` here (Whisper leaves it uninitialised; a checkpoint
    supplies it)."""

    def __init__(self, d_model: int, dropout_rate: float, max_len: int = 1500, learnable: bool = False):
        super().__init__(d_model, dropout_rate, max_len=1)
        self.xscale = 1.0
        self.max_len = max_len
        del self.pe
        if learnable:
            self.pe = nn.Parameter(torch.randn(1, max_len, d_model) * 0.02)
        else:
            self.register_buffer("pe", whisper_sinusoids(max_len, d_model).unsqueeze(0))

    def _table(self, length: int) -> torch.Tensor:
        if length > self.max_len:
            raise ValueError(f"position {length - 1} is past this model's {self.max_len}-row positional table")
        return self.pe[:, :length]

    @torch.jit.unused
    def rows_at(self, start: torch.Tensor, cache_frames: int, chunk_frames: int) -> torch.Tensor:
        """The table rows of positions ``start − cache_frames .. start + chunk_frames − 1``
        per stream (see :meth:`PositionalEncoding.rows_at`), gathered from ``PE``; rows of
        negative positions are zeros."""
        positions = start.reshape(-1, 1) + torch.arange(-cache_frames, chunk_frames, dtype=start.dtype)
        rows = self.pe[0].index_select(0, positions.clamp(min=0).reshape(-1))
        rows = rows.view(positions.size(0), positions.size(1), self.d_model)
        return rows.masked_fill((positions < 0).unsqueeze(-1), 0.0)


class RelPositionalEncoding(PositionalEncoding):
    """WeNet's relative encoding (``pos_enc_layer_type: rel_pos``): returns
    ``(dropout(x · sqrt(d_model)), dropout(PE[offset : offset + T]))``.  Nothing is added
    to ``x``; the absolute table slice goes to
    :class:`~asrkit.models.attention.RelPositionMultiHeadedAttention`, which scores key
    ``j`` with ``W_pos · PE(offset + j)`` (no relative shift).  The table is the same
    sinusoid as :class:`PositionalEncoding`'s (WeNet stores it in checkpoints as ``pe``,
    ``[1, max_len, d_model]``)."""

    def forward(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        pos = self._table(offset + x.size(1))[:, offset:].to(x.dtype)
        return self.dropout(x * self.xscale), self.dropout(pos)

    def chunk_table(self, offset: int, cache_frames: int, chunk_frames: int) -> torch.Tensor:
        """``dropout(key_rows(...))``: the table rows of a chunk's keys, cache rows first
        (WeNet's ``position_encoding(offset − cache_t, cache_t + chunk)``)."""
        return self.dropout(self.key_rows(offset, cache_frames, chunk_frames))

    @torch.jit.unused
    def chunk_at(self, x: torch.Tensor, start: torch.Tensor, cache_frames: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """ONNX-export form (see :meth:`PositionalEncoding.chunk_at`): ``(x · sqrt(d),
        key rows)``; nothing is added to ``x``."""
        rows = self.rows_at(start, cache_frames, x.size(1)).to(x.dtype)
        return self.dropout(x * self.xscale), self.dropout(rows)


class XLRelPositionalEncoding(nn.Module):
    """Transformer-XL relative encoding (``pos_enc_layer_type: rel_pos_xl``) for ``T`` frames: returns ``(dropout(x · sqrt(d_model)),
    dropout(R))`` where ``R[0, k] = PE(T − 1 − k)`` for ``k = 0 .. 2T−2``, i.e. the
    relative distances ``i − j`` from ``T−1`` down to ``−(T−1)``."""

    def __init__(self, d_model: int, dropout_rate: float, max_len: int = 5000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self.dropout = Dropout(dropout_rate)
        self.max_len = max_len
        self.register_buffer("pe", self._build(max_len), persistent=False)

    def _build(self, max_len: int) -> torch.Tensor:
        positions = torch.arange(max_len - 1, -max_len, -1)
        return sinusoid_table(positions, self.d_model).unsqueeze(0)

    def distance_table(self, longest: int, shortest: int) -> torch.Tensor:
        """``[1, longest + shortest + 1, d_model]``: ``PE`` of the distances ``longest``
        down to ``−shortest``."""
        if torch.jit.is_tracing():  # ONNX export: rows computed in the graph, no length limit
            return sinusoid_table(torch.arange(longest, -shortest - 1, -1), self.d_model).unsqueeze(0)
        needed = max(longest, shortest) + 1
        if needed > self.max_len:
            self.max_len = needed
            self.pe = self._build(needed).to(self.pe.device)
        center = self.max_len - 1
        return self.pe[:, center - longest: center + shortest + 1]

    def relative_table(self, length: int) -> torch.Tensor:
        """``[1, 2·length − 1, d_model]`` table for distances ``length−1 .. −(length−1)``."""
        return self.distance_table(length - 1, length - 1)

    def forward(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``offset`` is accepted for a common signature and unused: only distances matter."""
        pos = self.relative_table(x.size(1)).to(x.dtype)
        return self.dropout(x * self.xscale), self.dropout(pos)

    def chunk_table(self, offset: int, cache_frames: int, chunk_frames: int) -> torch.Tensor:
        """The distances between a chunk's ``chunk_frames`` queries and its
        ``cache_frames + chunk_frames`` keys (cache first), ``cache_frames + chunk_frames − 1``
        down to ``−(chunk_frames − 1)``: ``[1, cache_frames + 2·chunk_frames − 1, d_model]``,
        what :class:`~asrkit.models.attention.XLRelPositionMultiHeadedAttention` reads.
        ``offset`` is unused (only distances matter)."""
        return self.dropout(self.distance_table(cache_frames + chunk_frames - 1, chunk_frames - 1))

    @torch.jit.unused
    def chunk_at(self, x: torch.Tensor, start: torch.Tensor, cache_frames: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """ONNX-export form (see :meth:`PositionalEncoding.chunk_at`); ``start`` is unused:
        only distances matter."""
        return self.dropout(x * self.xscale), self.chunk_table(0, cache_frames, x.size(1)).to(x.dtype)
