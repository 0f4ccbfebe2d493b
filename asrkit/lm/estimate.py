"""Estimating an ARPA model from text: interpolated modified Kneser-Ney smoothing, as KenLM's
``lmplz`` computes it (Heafield et al. 2013; Chen & Goodman 1998), with its pruning.

For an order-``N`` model of sentences ``<s> w1 ... wk </s>``:

1. **Counts.**  The ``N``-grams keep their raw counts.  A lower-order n-gram's *adjusted*
   count is the number of distinct words seen before it (its continuation count); an
   n-gram starting with ``<s>`` has nothing before it and keeps its raw count.
2. **Discounts** per order, from the counts of adjusted counts ``t_k`` (n-grams whose
   adjusted count is ``k``): ``Y = t1 / (t1 + 2 t2)``, ``D_k = k − (k + 1) Y t_{k+1} / t_k``
   for ``k`` = 1, 2, 3 (``D_3`` for every count of 3 and more).  Where they cannot be
   computed (a ``t_k`` of 0, a discount outside [0, k]: tiny or artificial corpora) the
   estimate stops with :class:`EstimateError`, or with ``discount_fallback`` uses KenLM's
   ``--discount_fallback`` values 0.5, 1, 1.5.
3. **Interpolation.**  For a history ``h`` whose extensions have adjusted counts ``a(h w)``
   summing to ``A(h)``: ``P(w | h) = (a(h w) − D(a(h w))) / A(h) + γ(h) · P(w | h')``
   (``h'``: ``h`` less its first word) with ``γ(h) = Σ_w D(a(h w)) / A(h)``; the unigrams
   interpolate with the uniform distribution over the vocabulary (``<s>`` excluded,
   ``<unk>`` included: ``<unk>`` gets ``γ / |V|``).  ``γ(h)`` is the back-off weight the
   ARPA file stores for ``h``, so the back-off form gives the interpolated probabilities.
4. **Pruning** (``prune``: one threshold per order, the last one repeated; KenLM's
   ``--prune``): an n-gram (n >= 2) whose adjusted count is at most its order's threshold
   is dropped unless a longer kept n-gram starts or ends with it; the discounted mass of
   the dropped ones moves into ``γ(h)``, so every history's probabilities still sum to 1.

``<s>`` is never predicted (log10 probability -99, its back-off stored).
"""
from __future__ import annotations

import collections
import math
from typing import Dict, Iterable, List, Sequence, Tuple

from asrkit.lm.arpa import Arpa
from asrkit.lm.words import BOS, EOS, UNK, lm_words

FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
Ngram = Tuple[str, ...]


class EstimateError(ValueError):
    """Text or options an n-gram model cannot be estimated from (one line)."""


def count_ngrams(sentences: Iterable[Sequence[str]], order: int) -> List[Dict[Ngram, int]]:
    """Raw counts of every n-gram (n = 1..``order``) of ``<s> sentence </s>``."""
    counts: List[Dict[Ngram, int]] = [collections.Counter() for _ in range(order)]
    for sentence in sentences:
        words = (BOS, *sentence, EOS)
        for n in range(1, order + 1):
            table = counts[n - 1]
            for i in range(len(words) - n + 1):
                table[words[i:i + n]] += 1
    return counts


def adjusted_counts(counts: List[Dict[Ngram, int]]) -> List[Dict[Ngram, int]]:
    """Raw counts at the highest order and for n-grams starting with ``<s>``, continuation
    counts (distinct words before) for the others; the unigram ``<s>`` left out."""
    order = len(counts)
    adjusted: List[Dict[Ngram, int]] = [dict() for _ in range(order)]
    adjusted[order - 1] = dict(counts[order - 1])
    for n in range(order - 1, 0, -1):
        table: Dict[Ngram, int] = collections.Counter()
        for longer in counts[n]:
            table[longer[1:]] += 1  # (one per distinct word before; <s> never comes second)
        for ngram, count in counts[n - 1].items():
            if ngram[0] == BOS:
                table[ngram] = count
        adjusted[n - 1] = dict(table)
    adjusted[0].pop((BOS,), None)
    return adjusted


def discounts(adjusted: Dict[Ngram, int], n: int, fallback: bool) -> Tuple[float, float, float]:
    """``(D1, D2, D3+)`` of one order's adjusted counts (module docstring, step 2)."""
    t = collections.Counter(min(c, 4) for c in adjusted.values())
    problem = ""
    if t[1] == 0 or t[2] == 0 or t[3] == 0:
        missing = next(k for k in (1, 2, 3) if t[k] == 0)
        problem = f"no {n}-grams with adjusted count {missing}"
    else:
        y = t[1] / (t[1] + 2 * t[2])
        values = tuple(k - (k + 1) * y * t[k + 1] / t[k] for k in (1, 2, 3))
        bad = [k for k, d in zip((1, 2, 3), values) if not 0.0 <= d <= k]
        if not bad:
            return values
        problem = f"the {n}-gram discount D{bad[0]} = {values[bad[0] - 1]:.3f} is outside [0, {bad[0]}]"
    if fallback:
        return FALLBACK_DISCOUNTS
    raise EstimateError(f"cannot compute Kneser-Ney discounts: {problem} (small or artificial text?); "
                        f"use discount_fallback (--discount_fallback) for KenLM's 0.5 1 1.5")


def _discount(d: Tuple[float, float, float], count: int) -> float:
    return d[min(count, 3) - 1]


def prune_thresholds(prune: Sequence[int], order: int) -> List[int]:
    """One threshold per order from ``prune`` (the last value repeated; empty: no pruning),
    checked as KenLM checks them: unigrams are not pruned, thresholds do not decrease."""
    values = list(prune) or [0]
    if any(v < 0 for v in values):
        raise EstimateError(f"prune thresholds must be >= 0, got {' '.join(map(str, values))}")
    if values[0] != 0:
        raise EstimateError(f"unigrams cannot be pruned: the first prune threshold must be 0, got {values[0]}")
    if any(b < a for a, b in zip(values, values[1:])):
        raise EstimateError(f"prune thresholds must not decrease, got {' '.join(map(str, values))}")
    return (values + [values[-1]] * order)[:order]


def kept_ngrams(adjusted: List[Dict[Ngram, int]], thresholds: List[int]) -> List[set]:
    """The n-grams each order keeps (module docstring, step 4)."""
    order = len(adjusted)
    kept: List[set] = [set() for _ in range(order)]
    kept[0] = set(adjusted[0])
    for n in range(order, 1, -1):
        keep = {g for g, c in adjusted[n - 1].items() if c > thresholds[n - 1]}
        if n < order:
            for longer in kept[n]:
                keep.add(longer[:-1])
                keep.add(longer[1:])
        kept[n - 1] = keep
    return kept


def estimate(sentences: Iterable[Sequence[str]], order: int, prune: Sequence[int] = (),
             discount_fallback: bool = False) -> Arpa:
    """The interpolated modified Kneser-Ney model of ``sentences`` (lists of words), as an
    :class:`asrkit.lm.arpa.Arpa` (module docstring)."""
    if order < 1:
        raise EstimateError(f"order must be >= 1, got {order}")
    counts = count_ngrams(sentences, order)
    if not counts[0]:
        raise EstimateError("no text to estimate a language model from")
    adjusted = adjusted_counts(counts)
    thresholds = prune_thresholds(prune, order)
    kept = kept_ngrams(adjusted, thresholds)
    d = [discounts(adjusted[n - 1], n, discount_fallback) for n in range(1, order + 1)]
    vocab = sorted({g[0] for g in adjusted[0]} | {UNK, EOS} - {BOS})
    probs: List[Dict[Ngram, float]] = [dict() for _ in range(order)]  # linear probabilities
    gammas: List[Dict[Ngram, float]] = [dict() for _ in range(order)]  # back-off of each history
    total = sum(adjusted[0].values())
    gamma = sum(_discount(d[0], c) for c in adjusted[0].values()) / total
    for w in vocab:
        c = adjusted[0].get((w,), 0)
        probs[0][(w,)] = (c - _discount(d[0], c) if c else 0.0) / total + gamma / len(vocab)
    gammas[0][()] = gamma

    def lower_prob(history: Ngram, word: str) -> float:
        """P(word | history) of the model built so far (orders up to len(history) + 1)."""
        scale = 1.0
        while (history + (word,)) not in probs[len(history)]:
            scale *= gammas[len(history)].get(history, 1.0)
            history = history[1:]
        return scale * probs[len(history)][history + (word,)]

    for n in range(2, order + 1):
        by_history: Dict[Ngram, List[Ngram]] = collections.defaultdict(list)
        for g in adjusted[n - 1]:
            by_history[g[:-1]].append(g)
        for history, extensions in by_history.items():
            mass = sum(adjusted[n - 1][g] for g in extensions)
            left = 0.0
            for g in extensions:
                c = adjusted[n - 1][g]
                left += _discount(d[n - 1], c) if g in kept[n - 1] else c
            gamma = left / mass
            gammas[n - 1][history] = gamma
            for g in extensions:
                if g in kept[n - 1]:
                    c = adjusted[n - 1][g]
                    probs[n - 1][g] = (c - _discount(d[n - 1], c)) / mass + gamma * lower_prob(history[1:], g[-1])
    return _as_arpa(order, probs, gammas)


def _as_arpa(order: int, probs: List[Dict[Ngram, float]], gammas: List[Dict[Ngram, float]]) -> Arpa:
    """ARPA tables (log10) in a fixed order: ``<unk> <s> </s>`` first, then sorted n-grams."""
    first = {UNK: 0, BOS: 1, EOS: 2}
    tables = []
    for n in range(1, order + 1):
        entries = dict(probs[n - 1])
        if n == 1:
            entries[(BOS,)] = 0.0
        keys = sorted(entries, key=lambda g: [(first.get(w, 3), w) for w in g])
        table = {}
        for g in keys:
            p = entries[g]
            log_p = -99.0 if g == (BOS,) else math.log10(p)
            backoff = gammas[n].get(g) if n < order else None
            table[g] = (log_p, 0.0 if backoff is None else (math.log10(backoff) if backoff > 0 else -99.0))
        tables.append(table)
    return Arpa(order, tables)


def estimate_from_texts(texts: Iterable[str], order: int, prune: Sequence[int] = (),
                        discount_fallback: bool = False) -> Arpa:
    """:func:`estimate` over transcripts, split into words by :func:`asrkit.lm.words.lm_words`."""
    return estimate((lm_words(t) for t in texts), order, prune, discount_fallback)
