"""Where each token of a hypothesis sits on the encoder frames, from CTC log-posteriors.

A token's span is ``(start, end)`` in encoder frames, ``end`` exclusive: the frames on
which a CTC path emits that token -- its spike, usually one or two frames -- from the
first one (``start``) to the last one plus one (``end``).

* :func:`best_path_spans`: the best CTC path itself (per-frame argmax, as
  :func:`asrkit.decode.ctc_search.ctc_greedy_search`): every run of one non-blank id is a
  token, its frames the span.  The tokens are exactly the greedy search's.
* :func:`forced_alignment`: for a given token sequence (the result of any other mode),
  the Viterbi path -- the single most probable CTC path among those spelling exactly
  these tokens (blank-interleaved states ``<b> y1 <b> y2 ... yL <b>``; a path stays on a
  state, moves to the next, or skips the blank between two *different* tokens) -- and
  each token's frames on it.  For the greedy search's own tokens it is the best path
  (the argmax path spells them and nothing scores higher), so both functions agree there.

Both work on one utterance's ``[T, V]`` log-posteriors (no padding) and return one
:class:`TokenSpan` per token, in order.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import torch

NEG_INF = float("-inf")


class TokenSpan(NamedTuple):
    token: int
    start: int  # first encoder frame emitting the token
    end: int    # last such frame + 1


class AlignmentError(ValueError):
    """The tokens cannot be aligned: no CTC path of ``T`` frames spells them (more tokens,
    counting a blank between equal neighbours, than frames) or a token id is out of range."""


def best_path_spans(log_probs: torch.Tensor, blank: int = 0) -> list[TokenSpan]:
    """The tokens of the best CTC path of ``log_probs [T, V]`` and their spans: each run of
    equal non-blank argmax ids is one token, ``start`` its first frame, ``end`` its last + 1."""
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be [T, V], got shape {tuple(log_probs.shape)}")
    best = log_probs.argmax(dim=-1).tolist()
    spans: list[TokenSpan] = []
    previous = blank
    for t, token in enumerate(best):
        if token != blank:
            if token == previous:
                spans[-1] = spans[-1]._replace(end=t + 1)
            else:
                spans.append(TokenSpan(token, t, t + 1))
        previous = token
    return spans


def forced_alignment(log_probs: torch.Tensor, tokens: Sequence[int], blank: int = 0) -> list[TokenSpan]:
    """The spans of ``tokens`` on the Viterbi CTC path of ``log_probs [T, V]`` (module
    docstring).  Ties between equally probable predecessors go to staying on a state,
    then to the previous state.  Raises :class:`AlignmentError` when no path of ``T``
    frames spells ``tokens``; an empty ``tokens`` gives ``[]``."""
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be [T, V], got shape {tuple(log_probs.shape)}")
    tokens = [int(t) for t in tokens]
    if not tokens:
        return []
    frames, vocab = log_probs.shape
    if any(not 0 <= t < vocab or t == blank for t in tokens):
        raise AlignmentError(f"token ids {tokens} must be non-blank ids below {vocab}")
    states = np.full(2 * len(tokens) + 1, blank, dtype=np.int64)
    states[1::2] = tokens
    num_states = states.size
    # a state may be reached from two back when it is a token differing from the one before the blank
    skip = np.zeros(num_states, dtype=bool)
    skip[3::2] = states[3::2] != states[1:-2:2]
    emit = log_probs.detach().to("cpu", torch.float64).numpy()[:, states]  # [T, S]
    score = np.full(num_states, NEG_INF)
    score[:2] = emit[0, :2] if frames else NEG_INF
    back = np.zeros((frames, num_states), dtype=np.int8)  # 0: stayed, 1: from s-1, 2: from s-2
    for t in range(1, frames):
        from_prev = np.concatenate(([NEG_INF], score[:-1]))
        from_skip = np.where(skip, np.concatenate(([NEG_INF, NEG_INF], score[:-2])), NEG_INF)
        candidates = np.stack([score, from_prev, from_skip])
        choice = candidates.argmax(axis=0)  # first maximum: stay, then previous
        back[t] = choice
        score = candidates[choice, np.arange(num_states)] + emit[t]
    if frames == 0 or max(score[-1], score[-2]) == NEG_INF:
        raise AlignmentError(f"{len(tokens)} tokens cannot be aligned to {frames} frames")
    state = num_states - 1 if score[-1] >= score[-2] else num_states - 2
    path = np.empty(frames, dtype=np.int64)
    for t in range(frames - 1, -1, -1):
        path[t] = state
        state -= int(back[t, state])
    spans: list[TokenSpan] = []
    for t, s in enumerate(path.tolist()):
        if s % 2 == 1:
            index = s // 2
            if index == len(spans):
                spans.append(TokenSpan(tokens[index], t, t + 1))
            else:
                spans[index] = spans[index]._replace(end=t + 1)
    return spans


__all__ = ["AlignmentError", "TokenSpan", "best_path_spans", "forced_alignment"]
