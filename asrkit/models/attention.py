"""Multi-head attention: plain, and two relative-position forms with learned biases ``u``
(content) and ``v`` (position): WeNet's (``rel_pos``, scored against absolute table rows,
no shift) and Transformer-XL's (``rel_pos_xl``, scored against relative distances with a
shift).  All run through ``torch.nn.functional.scaled_dot_product_attention``.

Masks are boolean, ``True`` where attention is allowed, shaped ``[B, 1, Tk]`` (same
keys for every query) or ``[B, Tq, Tk]``.  A query row that allows no key gets zero
attention weights (:func:`allow_rows_without_keys`), never NaN.  ``forward_chunk`` is
self-attention of one streaming chunk over a cache of the keys and values before it.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadedAttention(nn.Module):
    """``softmax(q kᵀ / sqrt(d_k) + mask) v`` over ``n_head`` heads of size ``n_feat / n_head``.
    ``key_bias=False``: the key projection has no bias (WeNet's ``key_bias``, Whisper's
    attention); every other projection always has one."""

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float, key_bias: bool = True):
        super().__init__()
        if n_feat % n_head:
            raise ValueError(f"attention size {n_feat} is not divisible by {n_head} heads")
        self.h = n_head
        self.d_k = n_feat // n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat, bias=key_bias)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.dropout_rate = dropout_rate

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, H·d_k] -> [B, H, T, d_k]``."""
        return x.view(x.size(0), x.size(1), self.h, self.d_k).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, T, d_k] -> [B, T, H·d_k]``."""
        return x.transpose(1, 2).reshape(x.size(0), x.size(2), self.h * self.d_k)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
               no_key: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Heads-split ``q, k, v``; ``mask`` is bool (allowed) or float (additive bias),
        broadcastable to ``[B, H, Tq, Tk]``.  ``no_key [B, 1, Tq, 1]`` (from
        :func:`allow_rows_without_keys`): rows whose context is set to zero."""
        p = self.dropout_rate if self.training else 0.0
        if not torch.jit.is_scripting() and q.device.type == "cpu" and q.dtype == torch.bfloat16:
            out = _sdpa_fp32(q, k, v, mask, p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        if no_key is not None:
            out = out.masked_fill(no_key, 0.0)
        return self.linear_out(self.merge_heads(out))

    def qkv(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Projected, heads-split ``q [B, H, Tq, d_k]``, ``k, v [B, H, Tk, d_k]``."""
        q = self.split_heads(self.linear_q(query))
        k = self.split_heads(self.linear_k(key))
        v = self.split_heads(self.linear_v(value))
        return q, k, v

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor, pos_emb: Optional[torch.Tensor] = None,
                kv_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``pos_emb`` is ignored (kept so both attention types share one signature).
        ``kv_index [N]``: query row ``n`` attends to key/value row ``kv_index[n]`` (keys
        and values are projected once per distinct row, e.g. once per utterance for all
        its hypotheses); ``mask`` is then per query row."""
        q, k, v = self.qkv(query, key, value)
        if kv_index is not None:
            k = k.index_select(0, kv_index)
            v = v.index_select(0, kv_index)
        return self.attend_heads(q, k, v, mask, pos_emb)

    def attend_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     pos_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """Attention of heads-split ``q, k, v`` under the boolean ``mask [B, 1|Tq, Tk]``."""
        mask, no_key = allow_rows_without_keys(mask)
        return self.attend(q, k, v, mask.unsqueeze(1), no_key)

    def forward_chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor], pos_emb: torch.Tensor,
                      cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Self-attention of one chunk ``x [1, T, D]`` over the cached frames before it and
        itself.

        ``cache [1, H, C, 2·d_k]``: keys (``[..., :d_k]``) then values (``[..., d_k:]``)
        of the ``C`` frames before the chunk, as this method returned them (``C = 0``, or
        any empty tensor, at the start).  ``mask [1, 1|T, C + T]`` bool over those
        ``C + T`` keys (cache rows first), or ``None``: every key allowed.  ``pos_emb``: the
        positional table of the ``C + T`` keys (see the encodings' ``chunk_table``).
        Returns ``(out [1, T, D], new_cache [1, H, C + T, 2·d_k])``, the keys and values of
        the cache rows and the chunk; the caller trims it to the left context it keeps.
        ``N`` streams' chunks at once: every ``1`` above is ``N`` (``pos_emb [N|1, ...]``)."""
        q, k, v = self.qkv(x, x, x)
        if cache.size(0) > 0 and cache.size(2) > 0:
            k = torch.cat([cache[..., :self.d_k], k], dim=2)
            v = torch.cat([cache[..., self.d_k:], v], dim=2)
        new_cache = torch.cat([k, v], dim=-1)
        if mask is None:
            mask = torch.ones(1, 1, k.size(2), dtype=torch.bool, device=x.device)
        return self.attend_heads(q, k, v, mask, pos_emb), new_cache


def _sdpa_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
               dropout_p: float) -> torch.Tensor:
    """Attention of bf16 ``q, k, v`` on a CPU computed in fp32, returned in bf16.  Why: under
    bf16 autocast torch's CPU flash-attention backward is about 6x slower than in fp32 (8.4 %
    of a small conformer's step against 1.4 %, docs/performance.md), more than the matmuls
    around it gain; in fp32 the training step is ~8 % faster, and attention more exact."""
    if mask is not None and mask.is_floating_point():
        mask = mask.float()
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p)
    return out.to(q.dtype)


def allow_rows_without_keys(mask: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """For a boolean ``mask [B, Tq, Tk]`` with per-query rows, a row that allows no key
    (a padded frame of a chunk mask) makes a plain softmax NaN, in values and gradients
    (ONNX's Softmax, older torch; torch 2.14's CPU ``scaled_dot_product_attention`` already
    returns zeros there, the guard makes that independent of the backend or export).
    Such rows are opened to every key and reported as ``no_key [B, 1, Tq, 1]`` so
    :meth:`MultiHeadedAttention.attend` zeroes their context: their attention weights are
    zero, as WeNet's ``masked_fill`` after the softmax makes them, and the module returns
    ``linear_out``'s bias there.  A ``[B, 1, Tk]`` mask (the same keys for every query) is
    returned unchanged with ``None``: its rows are never empty (every utterance has a
    frame, every chunk sees itself)."""
    if mask.size(1) == 1:
        return mask, None
    no_key = ~mask.any(dim=-1, keepdim=True)
    return mask | no_key, no_key.unsqueeze(1)


class RelPositionMultiHeadedAttention(MultiHeadedAttention):
    """WeNet's relative-position self-attention (``pos_enc_layer_type: rel_pos``):

    ``score[i, j] = ((q_i + u)·k_j + (q_i + v)·p_j) / sqrt(d_k)``

    per head, where ``p_j = W_pos · PE(offset + j)`` (no bias) is the projected absolute
    table row of key ``j`` (from :class:`~asrkit.models.embedding.RelPositionalEncoding`)
    and ``u, v`` are learned per head.  Unlike Transformer-XL there is no relative shift:
    the position term depends on the key's position only.  Parameter names are WeNet's.
    """

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float, key_bias: bool = True):
        super().__init__(n_head, n_feat, dropout_rate, key_bias)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor, pos_emb: Optional[torch.Tensor] = None,
                kv_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Self-attention only (``kv_index`` must be ``None``); ``pos_emb`` as in
        :meth:`attend_heads`."""
        if kv_index is not None:
            raise ValueError("relative-position attention is self-attention only (no kv_index)")
        q, k, v = self.qkv(query, key, value)
        return self.attend_heads(q, k, v, mask, pos_emb)

    def projected_positions(self, pos_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """``W_pos · pos_emb``, heads-split: ``[1, H, P, d_k]``."""
        if pos_emb is None:
            raise ValueError("relative-position attention needs pos_emb")
        return self.split_heads(self.linear_pos(pos_emb))

    def attend_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     pos_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """``pos_emb [1, Tk, n_feat]``: the table rows of the keys' positions."""
        q_v = q + self.pos_bias_v.unsqueeze(1).to(q.dtype)
        p = self.projected_positions(pos_emb)
        bias = torch.matmul(q_v, p.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_k))
        return self.attend_with_position(q, k, v, bias, mask)

    def attend_with_position(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             position_scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention with content scores ``(q + u)·k / sqrt(d_k)`` plus the already
        scaled ``position_scores [B, H, Tq, Tk]``, under the boolean ``mask``."""
        mask, no_key = allow_rows_without_keys(mask)
        bias = position_scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        q_u = q + self.pos_bias_u.unsqueeze(1).to(q.dtype)
        return self.attend(q_u, k, v, bias, no_key)


def rel_shift(scores: torch.Tensor) -> torch.Tensor:
    """``[..., Tq, Tq+Tk−1] -> [..., Tq, Tk]`` (``Tk >= Tq``), picking
    ``out[i, j] = scores[i, Tq−1−i+j]``.

    Column ``c`` of the input holds relative distance ``Tk−1−c`` (see
    ``XLRelPositionalEncoding``: distances ``Tk−1 .. −(Tq−1)``) and query ``i`` sits at
    key position ``Tk−Tq+i`` (the queries are the last ``Tq`` keys), so ``out[i, j]`` is
    the score for distance ``(Tk−Tq+i) − j``; with ``Tq = Tk = T`` (input ``[T, 2T−1]``)
    that is ``i − j``.  Done without a gather: left-pad one zero column, flatten each
    ``[Tq, W+1]`` matrix (``W = Tq+Tk−1``), drop its first ``Tq`` elements and re-read the
    rest with row length ``W``.
    """
    tq = scores.size(-2)
    width = scores.size(-1)
    lead = scores.shape[:-2]
    padded = F.pad(scores, (1, 0)).reshape(lead + (tq * (width + 1),))
    return padded[..., tq:].reshape(lead + (tq, width))[..., :width - tq + 1]


class XLRelPositionMultiHeadedAttention(RelPositionMultiHeadedAttention):
    """Self-attention with relative positions (Transformer-XL, Dai et al. 2019, §3.3;
    ``pos_enc_layer_type: rel_pos_xl``):

    ``score[i, j] = ((q_i + u)·k_j + (q_i + v)·p_{i−j}) / sqrt(d_k)``

    per head, where ``p_r = W_pos · PE(r)`` (no bias), ``i − j`` the distance between the
    query's and the key's frames, and ``u, v`` are learned per head.  Scores depend on
    distances only, so a chunk attending to cached keys (:meth:`forward_chunk`) scores
    every visible key exactly as the masked full forward does.
    """

    def attend_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     pos_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """``pos_emb [1, Tq+Tk−1, n_feat]`` from ``XLRelPositionalEncoding`` (distances
        ``Tk−1 .. −(Tq−1)``; ``[1, 2T−1, n_feat]`` for the full forward); the queries are
        the last ``Tq`` of the ``Tk`` keys."""
        q_v = q + self.pos_bias_v.unsqueeze(1).to(q.dtype)
        p = self.projected_positions(pos_emb)
        position_scores = rel_shift(torch.matmul(q_v, p.transpose(-2, -1)))
        return self.attend_with_position(q, k, v, position_scores * (1.0 / math.sqrt(self.d_k)), mask)
