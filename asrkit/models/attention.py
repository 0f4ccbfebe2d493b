"""Multi-head attention: plain, and two relative-position forms with learned biases ``u``
(content) and ``v`` (position): WeNet's (``rel_pos``, scored against absolute table rows,
no shift) and Transformer-XL's (``rel_pos_xl``, scored against relative distances with a
shift).  All run through ``torch.nn.functional.scaled_dot_product_attention``.

Masks are boolean, ``True`` where attention is allowed, shaped ``[B, 1, Tk]`` (same
keys for every query) or ``[B, Tq, Tk]``.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadedAttention(nn.Module):
    """``softmax(q kᵀ / sqrt(d_k) + mask) v`` over ``n_head`` heads of size ``n_feat / n_head``."""

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__()
        if n_feat % n_head:
            raise ValueError(f"attention size {n_feat} is not divisible by {n_head} heads")
        self.h = n_head
        self.d_k = n_feat // n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.dropout_rate = dropout_rate

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, H·d_k] -> [B, H, T, d_k]``."""
        return x.view(x.size(0), x.size(1), self.h, self.d_k).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, T, d_k] -> [B, T, H·d_k]``."""
        return x.transpose(1, 2).reshape(x.size(0), x.size(2), self.h * self.d_k)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor) -> torch.Tensor:
        """Heads-split ``q, k, v``; ``mask`` is bool (allowed) or float (additive bias),
        broadcastable to ``[B, H, Tq, Tk]``."""
        p = self.dropout_rate if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.linear_out(self.merge_heads(out))

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor, pos_emb: Optional[torch.Tensor] = None,
                kv_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``pos_emb`` is ignored (kept so both attention types share one signature).
        ``kv_index [N]``: query row ``n`` attends to key/value row ``kv_index[n]`` (keys
        and values are projected once per distinct row, e.g. once per utterance for all
        its hypotheses); ``mask`` is then per query row."""
        q = self.split_heads(self.linear_q(query))
        k = self.split_heads(self.linear_k(key))
        v = self.split_heads(self.linear_v(value))
        if kv_index is not None:
            k = k.index_select(0, kv_index)
            v = v.index_select(0, kv_index)
        return self.attend(q, k, v, mask.unsqueeze(1))


class RelPositionMultiHeadedAttention(MultiHeadedAttention):
    """WeNet's relative-position self-attention (``pos_enc_layer_type: rel_pos``):

    ``score[i, j] = ((q_i + u)·k_j + (q_i + v)·p_j) / sqrt(d_k)``

    per head, where ``p_j = W_pos · PE(offset + j)`` (no bias) is the projected absolute
    table row of key ``j`` (from :class:`~asrkit.models.embedding.RelPositionalEncoding`)
    and ``u, v`` are learned per head.  Unlike Transformer-XL there is no relative shift:
    the position term depends on the key's position only.  Parameter names are WeNet's.
    """

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__(n_head, n_feat, dropout_rate)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor, pos_emb: Optional[torch.Tensor] = None,
                kv_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``pos_emb``: ``[1, Tk, n_feat]``, the table rows of the keys' positions;
        self-attention only (``kv_index`` must be ``None``)."""
        q, k, v, p = self.project(query, key, value, pos_emb, kv_index)
        q_v = q + self.pos_bias_v.unsqueeze(1).to(q.dtype)
        bias = torch.matmul(q_v, p.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_k))
        return self.attend_with_position(q, k, v, bias, mask)

    def project(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                pos_emb: Optional[torch.Tensor], kv_index: Optional[torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Heads-split ``q, k, v`` and the projected positions ``p [1, H, P, d_k]``."""
        if kv_index is not None:
            raise ValueError("relative-position attention is self-attention only (no kv_index)")
        if pos_emb is None:
            raise ValueError("relative-position attention needs pos_emb")
        q = self.split_heads(self.linear_q(query))
        k = self.split_heads(self.linear_k(key))
        v = self.split_heads(self.linear_v(value))
        p = self.split_heads(self.linear_pos(pos_emb))
        return q, k, v, p

    def attend_with_position(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             position_scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention with content scores ``(q + u)·k / sqrt(d_k)`` plus the already
        scaled ``position_scores [B, H, Tq, Tk]``, under the boolean ``mask``."""
        bias = position_scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        q_u = q + self.pos_bias_u.unsqueeze(1).to(q.dtype)
        return self.attend(q_u, k, v, bias)


def rel_shift(scores: torch.Tensor) -> torch.Tensor:
    """``[..., T, 2T−1] -> [..., T, T]``, picking ``out[i, j] = scores[i, T−1−i+j]``.

    Column ``k`` of the input holds relative distance ``T−1−k`` (see
    ``XLRelPositionalEncoding``), so ``out[i, j]`` is the score for distance ``i − j``.
    Done without a gather: left-pad one zero column, flatten each ``[T, 2T]`` matrix,
    drop its first ``T`` elements and re-read the rest with row length ``2T−1``.
    """
    t = scores.size(-2)
    lead = scores.shape[:-2]
    padded = F.pad(scores, (1, 0)).reshape(lead + (2 * t * t,))
    return padded[..., t:].reshape(lead + (t, 2 * t - 1))[..., :t]


class XLRelPositionMultiHeadedAttention(RelPositionMultiHeadedAttention):
    """Self-attention with relative positions (Transformer-XL, Dai et al. 2019, §3.3;
    ``pos_enc_layer_type: rel_pos_xl``):

    ``score[i, j] = ((q_i + u)·k_j + (q_i + v)·p_{i−j}) / sqrt(d_k)``

    per head, where ``p_r = W_pos · PE(r)`` (no bias) and ``u, v`` are learned per head.
    """

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor, pos_emb: Optional[torch.Tensor] = None,
                kv_index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``pos_emb``: ``[1, 2T−1, n_feat]`` from ``XLRelPositionalEncoding``; self-attention
        only (``query``, ``key``, ``value`` have the same length ``T``; ``kv_index`` must
        be ``None``)."""
        q, k, v, p = self.project(query, key, value, pos_emb, kv_index)  # p: [1, H, 2T-1, d_k]
        q_v = q + self.pos_bias_v.unsqueeze(1).to(q.dtype)
        position_scores = rel_shift(torch.matmul(q_v, p.transpose(-2, -1)))
        return self.attend_with_position(q, k, v, position_scores * (1.0 / math.sqrt(self.d_k)), mask)
