"""Contextual biasing: a context graph over a phrase list, with WeNet's semantics
(``wenet/utils/context_graph.py``, itself icefall's), in TorchScript's subset.

The graph is an Aho-Corasick automaton over the phrases' unit ids: a trie (goto arcs) plus,
per node, a failure arc to the node of its longest proper suffix that is also a trie path,
so overlapping and nested phrases all match.  A search carries one graph state per
hypothesis and calls :meth:`ContextGraph.step` for every unit it appends:

* a unit that continues the matched prefix earns ``score`` (a bonus per matched unit, so
  the partial phrase survives the beam);
* a unit that does not follows failure arcs to the longest suffix that it continues (or
  the root) and takes the bonus back: the score is ``node_score(new) − node_score(old)``
  (``node_score`` = depth · ``score``), negative when the path leaves a phrase;
* reaching a node that ends phrases -- its own, or those its failure chain ends (the
  output arcs) -- adds their ``output_score`` for good: ``depth · score`` per phrase ended;
* :meth:`ContextGraph.finalize` at the end of the hypothesis takes back the pending
  partial match (``−node_score``), so only completed phrases keep a bonus.

(WeNet's CTC prefix search *replaces* the accumulated context score by the finalize score
instead of adding it, which takes away the bonus of completed phrases as well; asrkit adds it,
as icefall's transducer searches and sherpa-onnx do.)
"""
# (no ``from __future__ import annotations``: TorchScript reads the annotations of ContextGraph)
import collections
from pathlib import Path
from typing import Dict, List, Sequence, Tuple


class ContextListError(ValueError):
    """A phrase list that cannot bias decoding (missing, empty, or spelled with units the
    model lacks): one line naming it."""


class ContextGraph(object):
    """The automaton (module docstring): node 0 is the root; ``goto[node * vocab_size +
    unit]`` the child, ``fail[node]`` the failure arc, ``depth[node]`` the matched units,
    ``output[node]`` the bonus of the phrases ending at it (its own and its output arcs').
    Built by :func:`build_context_graph`."""

    def __init__(self, vocab_size: int, score: float, goto: Dict[int, int], fail: List[int], depth: List[int],
                 output: List[float], matched: List[int], strict: bool):
        self.vocab_size = vocab_size
        self.score = score
        self.goto = goto
        self.fail = fail
        self.depth = depth
        self.output = output
        self.matched = matched  # the node of the longest phrase ending at each node (-1: none)
        self.strict = strict
        self.node_scores: List[float] = [d * score for d in depth]
        self.moves: Dict[int, int] = {}  # (node, unit) -> node, for units off the trie (memoised)

    def node_score(self, node: int) -> float:
        return self.node_scores[node]

    def _move(self, node: int, unit: int) -> int:
        key = node * self.vocab_size + unit
        if key in self.moves:
            return self.moves[key]
        target = self.fail[node]
        while target * self.vocab_size + unit not in self.goto and target != 0:
            target = self.fail[target]
        target = self.goto.get(target * self.vocab_size + unit, 0)
        self.moves[key] = target
        return target

    def step(self, node: int, unit: int) -> Tuple[float, int]:
        """``(score, next node)`` after appending ``unit`` in state ``node``."""
        target = self.goto.get(node * self.vocab_size + unit, -1)
        if target >= 0:
            score = self.score
        else:
            target = self._move(node, unit)
            score = self.node_scores[target] - self.node_scores[node]
        if self.strict or self.matched[target] < 0:
            return score + self.output[target], target
        # sherpa-onnx's non-strict mode: a completed phrase keeps its own bonus, the state goes
        # back to the root (no longer phrase continues it)
        return score + self.node_scores[self.matched[target]] - self.node_scores[target], 0

    def finalize(self, node: int) -> float:
        """The score that ends a hypothesis in state ``node``: the pending bonus taken back."""
        return -self.node_scores[node]


def build_context_graph(phrases: Sequence[Sequence[int]], score: float, vocab_size: int,
                        strict: bool = True) -> ContextGraph:
    """The :class:`ContextGraph` of ``phrases`` (unit-id sequences, none empty) with a bonus of
    ``score`` per matched unit; ``strict`` False: sherpa-onnx's non-strict matching (what its
    ``modified_beam_search`` uses for hotwords: after a completed phrase the state returns to
    the root, and the step that completes it earns the phrase's bonus once, not the pending
    bonus as well)."""
    goto: Dict[int, int] = {}
    depth = [0]
    ends = [False]
    for phrase in phrases:
        node = 0
        for unit in phrase:
            key = node * vocab_size + int(unit)
            if key not in goto:
                goto[key] = len(depth)
                depth.append(depth[node] + 1)
                ends.append(False)
            node = goto[key]
        ends[node] = True
    children: Dict[int, List[Tuple[int, int]]] = collections.defaultdict(list)
    for key, child in goto.items():
        children[key // vocab_size].append((key % vocab_size, child))
    fail = [0] * len(depth)
    output = [0.0] * len(depth)
    matched = [-1] * len(depth)
    queue = collections.deque(child for _, child in children[0])
    while queue:  # breadth first: a node's failure target is shallower, so already done
        node = queue.popleft()
        for unit, child in children[node]:
            target = fail[node]
            while target * vocab_size + unit not in goto and target != 0:
                target = fail[target]
            target = goto.get(target * vocab_size + unit, 0)
            fail[child] = target if target != child else 0
            queue.append(child)
        output[node] = (depth[node] * score if ends[node] else 0.0) + output[fail[node]]
        matched[node] = node if ends[node] else matched[fail[node]]
    return ContextGraph(vocab_size, float(score), goto, fail, depth, output, matched, strict)


def read_phrase_list(path) -> Tuple[str, ...]:
    """The phrases of a context list file (WeNet's ``--context_list_path``: one phrase per
    line, blank lines skipped); :class:`ContextListError` when it is missing or has none."""
    path = Path(path)
    if not path.is_file():
        raise ContextListError(f"context list not found: {path}")
    try:
        phrases = tuple(" ".join(line.split()) for line in path.read_text(encoding="utf-8").splitlines())
    except UnicodeDecodeError:
        raise ContextListError(f"{path}: not a UTF-8 text file of phrases") from None
    phrases = tuple(p for p in phrases if p)
    if not phrases:
        raise ContextListError(f"{path}: the context list is empty (one phrase per line)")
    return phrases


def tokenize_phrases(phrases: Sequence[str], tokenizer, source: str = "the phrase list") -> List[List[int]]:
    """Unit ids of each phrase as ``tokenizer`` (the model's) spells it; a phrase with a unit
    the model does not have (``<unk>``) is refused naming the phrase and the unit."""
    index = {symbol: i for i, symbol in enumerate(tokenizer.symbols)}
    special = {tokenizer.blank_id, tokenizer.unk_id, tokenizer.sos_id, tokenizer.eos_id}
    out: List[List[int]] = []
    for number, phrase in enumerate(phrases, 1):
        ids = []
        for symbol in tokenizer.text_to_symbols(phrase):
            unit = index.get(symbol, -1)
            if unit < 0 or unit in special:
                raise ContextListError(f"{source}, phrase {number} {phrase!r}: the unit {symbol!r} is not one of "
                                       f"the model's units")
            ids.append(unit)
        if not ids:
            raise ContextListError(f"{source}, phrase {number} {phrase!r}: no units")
        out.append(ids)
    return out
