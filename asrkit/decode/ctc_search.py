"""CTC searches over log-posteriors, written in the TorchScript subset of Python: eager
decoding runs them as Python, the exported module (:mod:`asrkit.export`) compiles the
same functions with ``torch.jit.script``.

* :func:`ctc_greedy_search` -- best path: per-frame argmax, merge repeats, drop blanks.
* :class:`PrefixBeamSearch` -- incremental prefix beam search (Graves 2012; Hannun et al.
  2014) of one utterance, summing over all alignments of each prefix, with WeNet's
  per-frame pruning to the ``beam_size`` most likely tokens: fed chunks of frames, asked
  for its n-best at any point.  With ``beam_size = 1`` it equals the greedy search.
* :func:`ctc_prefix_beam_search_nbest` -- that search over a padded batch ``[B, T, V]``;
  :func:`ctc_prefix_beam_search` returns the same as :class:`Hypothesis` lists.
* :func:`apply_blank_penalty` -- WeNet's ``blank_penalty``, applied to the log-posteriors
  before any of these searches.

Scores are Python floats (doubles) combined with :func:`log_add`; ties between equal
scores keep the order in which prefixes were first met (what a stable sort gives).

LM fusion and context biasing (:mod:`asrkit.decode.fusion`) plug in as an optional
:class:`~asrkit.decode.fusion.Fusion` (:func:`ctc_prefix_beam_search_fused`); without one the
search is exactly as without that module.
"""
from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from asrkit.decode.fusion import Fusion
from asrkit.decode.search_defaults import DEFAULT_BLANK_SKIP_THRESHOLD
from asrkit.models.mask import valid_mask

NEG_INF = float("-inf")


class Hypothesis(NamedTuple):
    tokens: tuple[int, ...]
    score: float  # log-probability


def log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))`` for Python floats, exact at ``-inf``."""
    if a < b:
        a, b = b, a
    if b == -math.inf:
        return a
    return a + math.log1p(math.exp(b - a))


def ctc_greedy_search(log_probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0) -> List[List[int]]:
    """Best-path decoding of each utterance's first ``lengths[b]`` frames of
    ``log_probs [B, T, V]``: per-frame argmax, repeats merged, ``blank`` dropped."""
    best = log_probs.argmax(dim=-1)  # [B, T]
    previous = torch.nn.functional.pad(best[:, :-1], [1, 0], value=-1.0)
    keep = (best != previous) & (best != blank) & valid_mask(lengths, best.size(1))
    out: List[List[int]] = []
    for b in range(best.size(0)):
        row: List[int] = best[b][keep[b]].tolist()
        out.append(row)
    return out


def apply_blank_penalty(log_probs: torch.Tensor, blank: int, blank_penalty: float) -> torch.Tensor:
    """WeNet's ``blank_penalty``: ``log_probs [..., V]`` (log-posteriors) with
    ``blank_penalty`` subtracted from every frame's ``blank`` entry and each frame
    renormalised (log-softmax again) -- the log-softmax of the CTC logits with the blank
    logit lowered by ``blank_penalty``, which is what WeNet's ``ctc_logprobs`` computes.
    Every CTC search then sees fewer blanks, and the CTC scores that attention rescoring
    adds are those of the penalised posteriors, as in WeNet.  ``blank_penalty = 0``
    returns ``log_probs`` itself; a negative one raises ``ValueError``."""
    if blank_penalty < 0.0:
        raise ValueError("blank_penalty must be >= 0, got {}".format(blank_penalty))
    if blank_penalty == 0.0:
        return log_probs
    penalty = torch.zeros(log_probs.size(-1), dtype=torch.float32, device=log_probs.device)
    penalty[blank] = blank_penalty
    return torch.log_softmax(log_probs.float() - penalty, dim=-1)


def blank_skip_log_threshold(blank_skip_threshold: float) -> float:
    """``log(blank_skip_threshold)`` (``-inf`` for a threshold <= 0: every frame skips)."""
    return math.log(blank_skip_threshold) if blank_skip_threshold > 0 else -math.inf


def _order_desc(scores: List[float]) -> List[int]:
    """Indices sorting ``scores`` in decreasing order, equal scores in list order (what
    Python's stable ``sorted(..., reverse=True)`` gives).  Done on lists: under
    TorchScript ``torch.tensor(List[float])`` rounds through float32."""
    groups: Dict[float, List[int]] = {}
    for i in range(len(scores)):
        key = scores[i] + 0.0  # -0.0 -> 0.0: one key per value
        if key in groups:
            groups[key].append(i)
        else:
            groups[key] = [i]
    values = list(groups.keys())
    values.sort(reverse=True)
    order: List[int] = []
    for value in values:
        order.extend(groups[value])
    return order


class PrefixBeamSearch:
    """CTC prefix beam search of one utterance, fed frames chunk by chunk.

    ``feed(log_probs [T_chunk, V])`` (or :meth:`advance` with a frame's top-k tokens)
    moves the search on; :meth:`nbest` gives the n-best prefixes so far and leaves the
    state as it is, so feeding may continue (partial results).  Feeding an utterance
    whole or in chunks of any sizes gives identical n-best lists and scores.

    State per kept prefix: ``log P(prefix, path ends in blank)`` (``beam_pb``) and
    ``log P(prefix, path ends in its last token)`` (``beam_pnb``).  Prefixes live in a
    trie of integer nodes (node 0 the empty prefix; the child of ``node`` by ``token`` is
    ``children[node * vocab_size + token]``), which TorchScript can hold (no tuple keys).

    Per frame, only the ``beam_size`` most likely tokens extend prefixes, and a frame with
    ``P(blank) > blank_skip_threshold`` creates no new prefix: each prefix only absorbs
    the blank or repeats its last token (pass 1.0 to disable).  After each other frame the
    ``beam_size`` best prefixes are kept (ties: the one first met), unreachable ones dropped.

    With ``fusion`` (:class:`asrkit.decode.fusion.Fusion`: an LM, a context graph) every trie
    node also holds its fusion state and the fusion score of its units, which is added to
    the CTC score wherever prefixes are ranked (pruning, :meth:`nbest`, there with the score
    that ends the hypothesis); without it (``None``) nothing else changes.
    """

    def __init__(self, beam_size: int, blank: int, vocab_size: int,
                 blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD, fusion: Optional[Fusion] = None):
        if beam_size < 1:
            raise ValueError("beam_size must be >= 1, got {}".format(beam_size))
        if blank < 0 or blank >= vocab_size:
            raise ValueError("blank id {} outside a vocabulary of {}".format(blank, vocab_size))
        self.beam_size = beam_size
        self.blank = blank
        self.vocab_size = vocab_size
        self.skip_lp = blank_skip_log_threshold(blank_skip_threshold)
        self.frames = 0
        self.parent: List[int] = [-1]
        self.last_token: List[int] = [-1]
        self.children: Dict[int, int] = {}
        self.beam: List[int] = [0]
        self.beam_pb: List[float] = [0.0]
        self.beam_pnb: List[float] = [-math.inf]
        self.fusion = fusion
        # with fusion, per trie node: LM state, the word it is spelling, context node, fusion score
        self.node_lm: List[int] = [-1]
        self.node_word: List[str] = [""]
        self.node_context: List[int] = [0]
        self.node_fused: List[float] = [0.0]

    def feed(self, log_probs: torch.Tensor) -> None:
        """Advance over ``log_probs [T_chunk, V]`` (log-posteriors of the next frames)."""
        if log_probs.dim() != 2 or log_probs.size(1) != self.vocab_size:
            raise ValueError("feed takes log-probabilities [T, {}], got {}".format(
                self.vocab_size, log_probs.size()))
        log_probs = log_probs.float()
        top = log_probs.topk(min(self.beam_size, self.vocab_size), dim=-1)
        top_lp: List[List[float]] = top[0].tolist()
        top_ids: List[List[int]] = top[1].tolist()
        blank_lp: List[float] = log_probs[:, self.blank].tolist()
        self.advance(top_lp, top_ids, blank_lp)

    def advance(self, top_lp: List[List[float]], top_ids: List[List[int]], blank_lp: List[float]) -> None:
        """Advance over frames given as their top-k tokens (log-probabilities and ids,
        best first, ``k = min(beam_size, V)``) and their blank log-probabilities."""
        for t in range(len(top_lp)):
            if blank_lp[t] > self.skip_lp:
                self._absorb_blank(top_lp[t], top_ids[t], blank_lp[t])
            else:
                self._extend(top_lp[t], top_ids[t])
            self.frames += 1

    def _absorb_blank(self, lps: List[float], ids: List[int], lp_blank: float) -> None:
        """A blank-dominated frame: prefixes only absorb the blank or repeat their last token."""
        for i in range(len(self.beam)):
            last = self.last_token[self.beam[i]]
            lp_last = -math.inf
            if last >= 0:
                for j in range(len(ids)):
                    if ids[j] == last:
                        lp_last = lps[j]
                        break
            pb = self.beam_pb[i]
            pnb = self.beam_pnb[i]
            self.beam_pb[i] = log_add(pb, pnb) + lp_blank
            self.beam_pnb[i] = pnb + lp_last

    def _child(self, node: int, token: int) -> int:
        key = node * self.vocab_size + token
        child = self.children.get(key, -1)
        if child < 0:
            child = len(self.parent)
            self.children[key] = child
            self.parent.append(node)
            self.last_token.append(token)
            fusion = self.fusion
            if fusion is not None:
                self._fuse(fusion, node, token)
        return child

    def _fuse(self, fusion: Fusion, parent: int, token: int) -> None:
        """The fusion state and score of the node just made, ``parent`` extended by ``token``."""
        lm, word, context, score = fusion.step(self.node_lm[parent], self.node_word[parent],
                                               self.node_context[parent], token)
        self.node_lm.append(lm)
        self.node_word.append(word)
        self.node_context.append(context)
        self.node_fused.append(self.node_fused[parent] + score)

    def _extend(self, lps: List[float], ids: List[int]) -> None:
        """One frame of the full search, then pruning to the ``beam_size`` best."""
        nodes: List[int] = []
        pb_next: List[float] = []
        pnb_next: List[float] = []
        where: Dict[int, int] = {}  # node -> index in the *_next lists, in order of first use
        for i in range(len(self.beam)):
            node = self.beam[i]
            pb = self.beam_pb[i]
            pnb = self.beam_pnb[i]
            total = log_add(pb, pnb)
            last = self.last_token[node]
            for j in range(len(ids)):
                token = ids[j]
                lp = lps[j]
                if token == self.blank:
                    s = _next_index(where, nodes, pb_next, pnb_next, node)
                    pb_next[s] = log_add(pb_next[s], total + lp)
                    continue
                extended = _next_index(where, nodes, pb_next, pnb_next, self._child(node, token))
                if token == last:
                    # a repeat needs a blank in between to start a new token ...
                    pnb_next[extended] = log_add(pnb_next[extended], pb + lp)
                    # ... otherwise it continues the prefix's last token
                    same = _next_index(where, nodes, pb_next, pnb_next, node)
                    pnb_next[same] = log_add(pnb_next[same], pnb + lp)
                else:
                    pnb_next[extended] = log_add(pnb_next[extended], total + lp)
        scores: List[float] = []
        fused = self.fusion is not None
        for s in range(len(nodes)):
            if fused:
                scores.append(log_add(pb_next[s], pnb_next[s]) + self.node_fused[nodes[s]])
            else:
                scores.append(log_add(pb_next[s], pnb_next[s]))
        cutoff = -1.7976931348623157e308  # the lowest double: drops only unreachable (-inf) prefixes
        if len(scores) > self.beam_size:
            ranked = scores.copy()
            ranked.sort(reverse=True)
            cutoff = max(cutoff, ranked[self.beam_size - 1])
        survivors: List[float] = []
        positions: List[int] = []
        for s in range(len(scores)):
            if scores[s] >= cutoff:
                survivors.append(scores[s])
                positions.append(s)
        beam: List[int] = []
        beam_pb: List[float] = []
        beam_pnb: List[float] = []
        for i in _order_desc(survivors)[: self.beam_size]:
            s = positions[i]
            beam.append(nodes[s])
            beam_pb.append(pb_next[s])
            beam_pnb.append(pnb_next[s])
        self.beam = beam
        self.beam_pb = beam_pb
        self.beam_pnb = beam_pnb

    def prefix(self, node: int) -> List[int]:
        """The tokens of trie node ``node``."""
        tokens: List[int] = []
        while node > 0:
            tokens.append(self.last_token[node])
            node = self.parent[node]
        tokens.reverse()
        return tokens

    def nbest(self) -> Tuple[List[List[int]], List[float]]:
        """The kept prefixes (at most ``beam_size``), best first (ties: earlier kept),
        and their CTC log-probabilities ``log Σ_{alignments} P``; the state is unchanged."""
        hyps, scores, _ = self.nbest_fused()
        return hyps, scores

    def nbest_fused(self) -> Tuple[List[List[int]], List[float], List[float]]:
        """:meth:`nbest` and each prefix's fusion score as a finished hypothesis (its units'
        scores and :meth:`asrkit.decode.fusion.Fusion.final`; all 0.0 without fusion),
        ranked by CTC + fusion score."""
        final: List[float] = []
        fused: List[float] = []
        ranking: List[float] = []
        fusion = self.fusion
        for i in range(len(self.beam)):
            final.append(log_add(self.beam_pb[i], self.beam_pnb[i]))
            if fusion is None:
                fused.append(0.0)
                ranking.append(final[i])
            else:
                node = self.beam[i]
                fused.append(self.node_fused[node] + fusion.final(self.node_lm[node], self.node_word[node],
                                                                  self.node_context[node]))
                ranking.append(final[i] + fused[i])
        hyps: List[List[int]] = []
        scores: List[float] = []
        fusion_scores: List[float] = []
        for i in _order_desc(ranking):
            hyps.append(self.prefix(self.beam[i]))
            scores.append(final[i])
            fusion_scores.append(fused[i])
        return hyps, scores, fusion_scores


def _next_index(where: Dict[int, int], nodes: List[int], pb: List[float], pnb: List[float], node: int) -> int:
    """Index of ``node`` in the next frame's lists, appended at (-inf, -inf) if new."""
    index = where.get(node, -1)
    if index < 0:
        index = len(nodes)
        where[node] = index
        nodes.append(node)
        pb.append(-math.inf)
        pnb.append(-math.inf)
    return index


def ctc_prefix_beam_search_nbest(log_probs: torch.Tensor, lengths: torch.Tensor, beam_size: int,
                                 blank: int = 0, blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD
                                 ) -> Tuple[List[List[List[int]]], List[List[float]]]:
    """:class:`PrefixBeamSearch` over each utterance's first ``lengths[b]`` frames of
    ``log_probs [B, T, V]``: per utterance, the n-best prefixes (at most ``beam_size``,
    best first) and their CTC log-probabilities.  With ``beam_size >= V`` and no blank
    skipping (threshold 1.0), every kept prefix's score is exact."""
    hyps, scores, _ = ctc_prefix_beam_search_fused(log_probs, lengths, beam_size, blank, blank_skip_threshold, None)
    return hyps, scores


def ctc_prefix_beam_search_fused(log_probs: torch.Tensor, lengths: torch.Tensor, beam_size: int, blank: int,
                                 blank_skip_threshold: float, fusion: Optional[Fusion]
                                 ) -> Tuple[List[List[List[int]]], List[List[float]], List[List[float]]]:
    """:func:`ctc_prefix_beam_search_nbest` with ``fusion`` (``None``: none), also returning
    each hypothesis' fusion score (:meth:`PrefixBeamSearch.nbest_fused`)."""
    if beam_size < 1:
        raise ValueError("beam_size must be >= 1, got {}".format(beam_size))
    vocab = log_probs.size(-1)
    log_probs = log_probs.float()
    top = log_probs.topk(min(beam_size, vocab), dim=-1)
    top_lp = top[0]
    top_ids = top[1]
    blank_lp = log_probs[:, :, blank]
    hyps: List[List[List[int]]] = []
    scores: List[List[float]] = []
    fusion_scores: List[List[float]] = []
    frames: List[int] = lengths.tolist()
    for b in range(len(frames)):
        n = frames[b]
        search = PrefixBeamSearch(beam_size, blank, vocab, blank_skip_threshold, fusion)
        frame_lp: List[List[float]] = top_lp[b, :n].tolist()
        frame_ids: List[List[int]] = top_ids[b, :n].tolist()
        frame_blank: List[float] = blank_lp[b, :n].tolist()
        search.advance(frame_lp, frame_ids, frame_blank)
        h, s, f = search.nbest_fused()
        hyps.append(h)
        scores.append(s)
        fusion_scores.append(f)
    return hyps, scores, fusion_scores


def ctc_prefix_beam_search(log_probs: torch.Tensor, lengths: torch.Tensor, beam_size: int, blank: int = 0,
                           blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD
                           ) -> list[list[Hypothesis]]:
    """:func:`ctc_prefix_beam_search_nbest` as :class:`Hypothesis` lists (eager only)."""
    hyps, scores = ctc_prefix_beam_search_nbest(log_probs, lengths, beam_size, blank, blank_skip_threshold)
    return [[Hypothesis(tuple(h), s) for h, s in zip(hs, ss)] for hs, ss in zip(hyps, scores)]
