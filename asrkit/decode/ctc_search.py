"""CTC searches over log-posteriors ``[B, T, V]`` (blank = 0).

* :func:`ctc_greedy_search` -- best path: per-frame argmax, merge repeats, drop blanks.
* :func:`ctc_prefix_beam_search` -- prefix beam search (Graves 2012; Hannun et al. 2014)
  summing over all alignments of each prefix, with WeNet's per-frame pruning to the
  ``beam_size`` most likely tokens.  With ``beam_size = 1`` it equals the greedy search.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from asrkit.models.mask import valid_mask

NEG_INF = float("-inf")
# A frame whose blank probability exceeds this only extends existing prefixes by blank
# or by repeating their last token (no new prefixes).
DEFAULT_BLANK_SKIP_THRESHOLD = 0.999


class Hypothesis(NamedTuple):
    tokens: tuple[int, ...]
    score: float  # log-probability


def log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))`` for Python floats, exact at ``-inf``."""
    if a < b:
        a, b = b, a
    if b == NEG_INF:
        return a
    return a + math.log1p(math.exp(b - a))


def ctc_greedy_search(log_probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0) -> list[list[int]]:
    """Best-path decoding of each utterance's first ``lengths[b]`` frames."""
    best = log_probs.argmax(dim=-1)  # [B, T]
    previous = torch.nn.functional.pad(best[:, :-1], (1, 0), value=-1)
    keep = (best != previous) & (best != blank) & valid_mask(lengths, best.size(1))
    return [row[mask].tolist() for row, mask in zip(best, keep)]


def _prefix_beam_search_one(topk_lp: list[list[float]], topk_ids: list[list[int]],
                            blank_lp: list[float], skip_lp: float, beam_size: int,
                            blank: int) -> list[Hypothesis]:
    """Prefix beam search on one utterance given its per-frame top-k tokens.
    State per prefix: ``[log P(prefix, path ends in blank), log P(prefix, ends in its last token)]``."""
    beams: dict[tuple[int, ...], list[float]] = {(): [0.0, NEG_INF]}
    for lps, ids, lp_blank in zip(topk_lp, topk_ids, blank_lp):
        if lp_blank > skip_lp:
            frame = dict(zip(ids, lps))
            for prefix, state in beams.items():
                lp_last = frame.get(prefix[-1], NEG_INF) if prefix else NEG_INF
                state[0], state[1] = log_add(state[0], state[1]) + lp_blank, state[1] + lp_last
            continue
        nxt: dict[tuple[int, ...], list[float]] = {}
        for prefix, (pb, pnb) in beams.items():
            total = log_add(pb, pnb)
            last = prefix[-1] if prefix else -1
            for token, lp in zip(ids, lps):
                if token == blank:
                    state = nxt.setdefault(prefix, [NEG_INF, NEG_INF])
                    state[0] = log_add(state[0], total + lp)
                    continue
                extended = prefix + (token,)
                state = nxt.setdefault(extended, [NEG_INF, NEG_INF])
                if token == last:
                    # a repeat needs a blank in between to start a new token ...
                    state[1] = log_add(state[1], pb + lp)
                    # ... otherwise it continues the prefix's last token
                    same = nxt.setdefault(prefix, [NEG_INF, NEG_INF])
                    same[1] = log_add(same[1], pnb + lp)
                else:
                    state[1] = log_add(state[1], total + lp)
        scored = [(log_add(pb, pnb), prefix, [pb, pnb]) for prefix, (pb, pnb) in nxt.items()]
        scored = [item for item in scored if item[0] > NEG_INF]  # unreachable prefixes
        scored.sort(key=lambda item: item[0], reverse=True)
        beams = {prefix: state for _, prefix, state in scored[:beam_size]}
    hyps = [Hypothesis(prefix, log_add(pb, pnb)) for prefix, (pb, pnb) in beams.items()]
    hyps.sort(key=lambda h: h.score, reverse=True)
    return hyps


def ctc_prefix_beam_search(log_probs: torch.Tensor, lengths: torch.Tensor, beam_size: int,
                           blank: int = 0,
                           blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD
                           ) -> list[list[Hypothesis]]:
    """N-best prefixes (at most ``beam_size``, best first) per utterance with their CTC
    log-probabilities ``log Σ_{alignments} P``.

    Approximations (both WeNet-compatible or exact in the limit): at each frame only the
    ``beam_size`` most likely tokens extend prefixes; frames with
    ``P(blank) > blank_skip_threshold`` create no new prefixes (pass 1.0 to disable).
    With ``beam_size >= V`` and no skipping, scores are exact for every prefix kept.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    k = min(beam_size, log_probs.size(-1))
    log_probs = log_probs.float()
    top_lp, top_ids = log_probs.topk(k, dim=-1)
    blank_lp = log_probs[..., blank]
    skip_lp = math.log(blank_skip_threshold) if blank_skip_threshold > 0 else NEG_INF
    results = []
    for b, length in enumerate(lengths.tolist()):
        results.append(_prefix_beam_search_one(top_lp[b, :length].tolist(), top_ids[b, :length].tolist(),
                                               blank_lp[b, :length].tolist(), skip_lp, beam_size, blank))
    return results
