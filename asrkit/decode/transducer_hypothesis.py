"""A transducer search's hypothesis (:class:`TransducerHypothesis`) and what LM fusion and
context biasing (:mod:`asrkit.decode.fusion`) do to one: :func:`fuse_child` when a search
extends it by a unit, :func:`finalized` when it ends.  TorchScript's subset, like the
searches of :mod:`asrkit.decode.transducer_search` that use them."""
# (no ``from __future__ import annotations``: TorchScript reads the annotations)
from typing import List, Optional

import torch

from asrkit.decode.fusion import Fusion


class TransducerHypothesis(object):
    """``tokens`` (without the leading ``<blank>``), their emission ``frames`` (indices into
    the encoder frames fed so far), the ``score`` the search ranks by, and the predictor
    ``state`` before the last token (``last`` is the token the next predictor step reads:
    ``<blank>`` before any).  ``pred_out`` / ``state_after``: greedy search's predictor
    output and state after ``last``, kept while it stays on a frame (empty: not computed)."""

    def __init__(self, tokens: List[int], frames: List[int], score: float, last: int, state: List[torch.Tensor]):
        self.tokens = tokens
        self.frames = frames
        self.score = score
        self.last = last
        self.state = state
        self.pred_out: List[torch.Tensor] = []
        self.state_after: List[torch.Tensor] = []
        # LM fusion and context biasing (asrkit.decode.fusion): the fusion state and the part of
        # ``score`` that fusion added (so that rescoring can weigh the search score without it)
        self.lm_state = -1
        self.word = ""
        self.context_state = 0
        self.fused = 0.0


def fuse_child(child: TransducerHypothesis, parent: TransducerHypothesis, unit: int, blank: int,
               fusion: Optional[Fusion]) -> TransducerHypothesis:
    """``child`` (of ``parent`` by ``unit``) with its fusion state, its score raised by what
    ``fusion`` adds for ``unit`` (nothing for a blank); ``child`` itself without fusion."""
    if fusion is None:
        return child
    _copy_fusion_state(child, parent, 0.0)
    if unit != blank:
        lm_state, word, context_state, score = fusion.step(parent.lm_state, parent.word, parent.context_state, unit)
        child.lm_state = lm_state
        child.word = word
        child.context_state = context_state
        child.fused += score
        child.score += score
    return child


def _copy_fusion_state(to: TransducerHypothesis, source: TransducerHypothesis, extra: float) -> None:
    to.lm_state = source.lm_state
    to.word = source.word
    to.context_state = source.context_state
    to.fused = source.fused + extra


def finalized(beam: List[TransducerHypothesis], fusion: Optional[Fusion]) -> List[TransducerHypothesis]:
    """``beam`` as ended hypotheses: copies whose score (and ``fused``) include the score
    :meth:`asrkit.decode.fusion.Fusion.final` gives them; ``beam`` itself without fusion."""
    if fusion is None:
        return beam
    out: List[TransducerHypothesis] = []
    for hyp in beam:
        end = fusion.final(hyp.lm_state, hyp.word, hyp.context_state)
        copy = TransducerHypothesis(hyp.tokens, hyp.frames, hyp.score + end, hyp.last, hyp.state)
        _copy_fusion_state(copy, hyp, end)
        out.append(copy)
    return out


def best_by_score(beam: List[TransducerHypothesis]) -> TransducerHypothesis:
    """The first hypothesis of ``beam`` with the highest score."""
    best = beam[0]
    for hyp in beam:
        if hyp.score > best.score:
            best = hyp
    return best
