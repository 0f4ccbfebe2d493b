"""Shallow fusion of a word n-gram LM and contextual biasing, for every search that extends
hypotheses unit by unit (CTC prefix beam search, the transducer beam searches), in
TorchScript's subset.

A hypothesis carries a *fusion state*: its LM state (:class:`asrkit.lm.arpa.NgramLm`;
``-1`` = sentence start), the word it is spelling (units since the last word boundary) and
its context-graph node (:class:`asrkit.decode.context_graph.ContextGraph`; 0 = root).
:meth:`Fusion.step` appends one unit and returns the new state and the score it adds:

* **LM** -- units spell words (the model's units, :func:`unit_kinds`): a unit starting with
  ``▁`` (a BPE piece starting a word, or the space unit of char models) starts a new word;
  a CJK character, or any unit of a ``split_with_space`` model, is a word by itself; other
  units continue the current word.  When a word is complete -- the next word starts -- the
  LM scores it: ``lm_weight · ln P(word | history) + word_bonus``, where a word the LM does
  not know gets ``ln P(<unk> | history) − oov_penalty`` (as pyctcdecode's ``unk_score_offset``:
  an n-gram's ``<unk>`` is not much less likely than a rare word, and the word bonus would
  otherwise pay for spelling mistakes).  :meth:`Fusion.final`
  scores the last word and ``</s>`` when the hypothesis ends.  Words are those of
  :func:`asrkit.lm.words.lm_words`, what ``tools/train_lm.py`` estimates the LM over.
* **context graph** -- every unit steps the graph (a bonus per matched unit, taken back
  when the path leaves a phrase); :meth:`Fusion.final` takes back a pending partial match.

A search adds the step scores to the hypothesis' ranking score and :meth:`Fusion.final` at
the end; with no fusion object it runs exactly as without this module.
"""
# (no ``from __future__ import annotations``: TorchScript reads the annotations of Fusion)
import functools
import os
from typing import List, Optional, Sequence, Tuple

from asrkit.decode.context_graph import ContextGraph
from asrkit.lm.arpa import NgramLm, load_lm
from asrkit.text.cjk import is_cjk

CONTINUES = 0  # the unit continues the current word
STARTS = 1     # the unit starts a new word (its text after the leading ▁)
WHOLE = 2      # the unit is a word by itself
SILENT = 3     # the unit spells nothing (<blank>, <sos/eos>)
WORD_START = "\u2581"


class Fusion(object):
    """LM and/or context graph, with the model's unit spelling (module docstring).
    ``unit_kind`` / ``unit_text``: per unit id, one of the kinds above and its text."""

    def __init__(self, lm: Optional[NgramLm], lm_weight: float, word_bonus: float, oov_penalty: float,
                 unit_kind: List[int], unit_text: List[str], context: Optional[ContextGraph]):
        self.lm = lm
        self.lm_weight = lm_weight
        self.word_bonus = word_bonus
        self.oov_penalty = oov_penalty
        self.unit_kind = unit_kind
        self.unit_text = unit_text
        self.context = context

    def _word(self, lm: NgramLm, state: int, word: str) -> Tuple[float, int]:
        word_id = lm.word_id(word)
        lp, state = lm.score(state, word_id)
        if word_id == lm.unk:
            lp -= self.oov_penalty
        return self.lm_weight * lp + self.word_bonus, state

    def step(self, lm_state: int, word: str, context_state: int, unit: int) -> Tuple[int, str, int, float]:
        """``(LM state, word so far, context node, score)`` after appending ``unit``."""
        lm = self.lm
        context = self.context
        if lm is None and context is not None:  # (phrases alone: the common case kept short)
            score, context_state = context.step(context_state, unit)
            return lm_state, word, context_state, score
        score = 0.0
        if lm is not None:
            kind = self.unit_kind[unit]  # (TorchScript reads no module constants: 0 CONTINUES, 1 STARTS, 2 WHOLE)
            if kind == 1 or kind == 2:
                if len(word) > 0:
                    s, lm_state = self._word(lm, lm_state, word)
                    score += s
                word = self.unit_text[unit]
                if kind == 2:
                    s, lm_state = self._word(lm, lm_state, word)
                    score += s
                    word = ""
            elif kind == 0:
                word = word + self.unit_text[unit]
        if context is not None:
            s, context_state = context.step(context_state, unit)
            score += s
        return lm_state, word, context_state, score

    def final(self, lm_state: int, word: str, context_state: int) -> float:
        """The score that ends a hypothesis: its last word and ``</s>``, and the pending
        context bonus taken back."""
        score = 0.0
        lm = self.lm
        if lm is not None:
            if len(word) > 0:
                s, lm_state = self._word(lm, lm_state, word)
                score += s
            score += self.lm_weight * lm.score(lm_state, lm.eos)[0]
        context = self.context
        if context is not None:
            score += context.finalize(context_state)
        return score


def unit_kinds(symbols: Sequence[str], split_with_space: bool = False, silent: Sequence[int] = ()
               ) -> Tuple[List[int], List[str]]:
    """Per unit symbol, how it spells words (module docstring) and its text; ``silent``: the
    ids that spell nothing (``<blank>``, ``<sos/eos>``)."""
    kinds: List[int] = []
    texts: List[str] = []
    for i, symbol in enumerate(symbols):
        if i in silent:
            kinds.append(SILENT)
            texts.append("")
        elif split_with_space or (len(symbol) == 1 and is_cjk(symbol)):
            kinds.append(WHOLE)
            texts.append(symbol)
        elif symbol.startswith(WORD_START):
            kinds.append(STARTS)
            texts.append(symbol[len(WORD_START):])
        else:
            kinds.append(CONTINUES)
            texts.append(symbol)
    return kinds, texts


@functools.lru_cache(maxsize=4)
def _cached_lm(path: str, mtime_ns: int, size: int) -> NgramLm:
    return load_lm(path)


def cached_lm(path) -> NgramLm:
    """:func:`asrkit.lm.arpa.load_lm`, read once per file version (path, time and size)."""
    path = os.path.abspath(path)
    try:
        stat = os.stat(path)
    except OSError:
        return load_lm(path)  # (its one-line refusal)
    return _cached_lm(path, stat.st_mtime_ns, stat.st_size)
