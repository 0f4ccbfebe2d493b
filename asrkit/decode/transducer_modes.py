"""The transducer's decoding modes, with WeNet's names and options, run per utterance on the
encoder output every mode of a batch shares (:class:`asrkit.decode.modes.SharedOutputs`);
registered in :mod:`asrkit.decode.modes`.

* ``rnnt_greedy_search`` -- :class:`~asrkit.decode.transducer_search.TransducerGreedySearch`
  (up to 64 symbols per frame, WeNet's ``n_steps``).
* ``rnnt_beam_search`` -- WeNet's prefix beam search
  (:class:`~asrkit.decode.transducer_search.TransducerPrefixBeamSearch`), one symbol per
  frame, ranking units by ``log(search_transducer_weight · P_joint + search_ctc_weight ·
  P_ctc)``.
* ``modified_beam_search`` -- icefall's (:class:`~asrkit.decode.transducer_search.ModifiedBeamSearch`).
* ``rnnt_beam_attn_rescoring`` -- the ``rnnt_beam_search`` n-best rescored;
  ``ctc_beam_td_attn_rescoring`` -- the CTC prefix-beam n-best (shared with the CTC modes)
  rescored.  Both pick, as WeNet's ``transducer_attention_rescoring``, the hypothesis
  maximising ``attn_weight · attention + ctc_weight · search score + transducer_weight ·
  log P_rnnt(y | x)``, where *attention* is ``(1 − reverse_weight) · l2r + reverse_weight ·
  r2l`` (the same decoder scores as ``attention_rescoring``), the search score is the
  n-best's own (transducer prefix-beam or CTC prefix score), and ``log P_rnnt`` is minus the
  RNN-T loss of the hypothesis (its full lattice, not the one path the search took).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import torch

from asrkit.decode.transducer_search import TransducerHypothesis, TransducerPrefixBeamSearch, TransducerSearcher

if TYPE_CHECKING:
    from asrkit.decode.modes import SharedOutputs

MAX_SYMBOLS_PER_FRAME = 64  # WeNet's greedy_search n_steps


def transducer_parts(model) -> tuple:
    """``(searcher, rnnt_loss)`` of ``model``: a transducer's :class:`TransducerSearcher` and
    its per-utterance RNN-T loss (``transducer_loss``), or an exported archive's scripted
    searcher (its ``transducer`` attribute) and ``None`` (the rescoring modes are not in
    archives); ``(None, None)`` for anything else."""
    if model is None:
        return None, None
    scripted = getattr(model, "transducer", None)
    if scripted is not None:
        return scripted, None
    if getattr(model, "predictor", None) is None:
        return None, None
    return TransducerSearcher.of_model(model), model.transducer_loss


def _utterances(shared: "SharedOutputs"):
    """``(b, encoder frames [T_b, E])`` of every utterance of the batch."""
    for b, n in enumerate(shared.encoder_lengths.tolist()):
        yield b, shared.encoder_out[b, :n]


def greedy_hypotheses(shared: "SharedOutputs") -> List[TransducerHypothesis]:
    return _best(shared, "rnnt_greedy_search")


def _best(shared: "SharedOutputs", mode: str) -> List[TransducerHypothesis]:
    """Each utterance's result of a transducer search (:meth:`TransducerSearcher.best_per_utterance`,
    what an exported archive runs)."""
    args = (mode, shared.encoder_out, shared.encoder_lengths, None, shared.beam_size, 0.0, 1.0, MAX_SYMBOLS_PER_FRAME)
    if shared.fusion is None or mode == "rnnt_greedy_search":
        return shared.transducer.best_per_utterance(*args)
    return shared.transducer.best_per_utterance(*args, shared.fusion)


def prefix_beam_nbest(shared: "SharedOutputs") -> List[List[TransducerHypothesis]]:
    """The ``rnnt_beam_search`` beam of every utterance, best first."""
    with_ctc = shared.search_ctc_weight > 0
    log_probs = shared.log_probs() if with_ctc else None
    out = []
    for b, enc in _utterances(shared):
        search = TransducerPrefixBeamSearch(shared.transducer, enc.device, shared.beam_size,
                                            shared.search_ctc_weight, shared.search_transducer_weight,
                                            fusion=shared.fusion)
        search.feed(enc, log_probs[b, :enc.size(0)] if log_probs is not None else None)
        out.append(search.nbest())
    return out


def modified_beam_hypotheses(shared: "SharedOutputs") -> List[TransducerHypothesis]:
    return _best(shared, "modified_beam_search")


def transducer_log_likelihoods(shared: "SharedOutputs", b: int, hyps: List[List[int]]) -> List[float]:
    """``log P_rnnt(y | x)`` of each hypothesis of utterance ``b`` (minus its RNN-T loss)."""
    if not hyps:
        return []
    if shared.rnnt_loss is None:
        raise RuntimeError("the RNN-T rescoring needs the model's RNN-T loss: an exported archive has none")
    n = int(shared.encoder_lengths[b])
    enc = shared.encoder_out[b:b + 1, :n].expand(len(hyps), -1, -1)
    device = enc.device
    longest = max(1, max(len(h) for h in hyps))  # (torchaudio needs one target column at least)
    target = torch.full((len(hyps), longest), -1, dtype=torch.long, device=device)
    for i, h in enumerate(hyps):
        target[i, :len(h)] = torch.tensor(h, dtype=torch.long, device=device)
    lengths = torch.tensor([len(h) for h in hyps], dtype=torch.long, device=device)
    loss = shared.rnnt_loss(enc, torch.full((len(hyps),), n, dtype=torch.long, device=device), target,
                                 lengths)
    return (-loss).tolist()


def rescored(shared: "SharedOutputs", nbest: List[List[List[int]]], search_scores: List[List[float]],
             fusion_scores: Optional[List[List[float]]] = None) -> List[tuple[List[int], float]]:
    """Per utterance, ``(tokens, total)`` of the n-best entry maximising the rescoring total
    (module docstring), plus each entry's ``fusion_scores`` (LM and context: not part of the
    search score ``ctc_weight`` weighs); the empty hypothesis with score −inf where an
    n-best is empty."""
    attention = (shared.searcher.rescoring_scores(shared.encoder_out, shared.encoder_lengths, nbest,
                                                  shared.reverse_weight)
                 if shared.attn_weight > 0 else [[0.0] * len(h) for h in nbest])
    out = []
    for b, hyps in enumerate(nbest):
        rnnt = (transducer_log_likelihoods(shared, b, hyps) if shared.transducer_weight > 0
                else [0.0] * len(hyps))
        best, best_total = [], -float("inf")
        for i, hyp in enumerate(hyps):
            total = (shared.attn_weight * attention[b][i] + shared.ctc_weight * search_scores[b][i]
                     + shared.transducer_weight * rnnt[i])
            if fusion_scores is not None:
                total = total + fusion_scores[b][i]
            if total > best_total:
                best, best_total = list(hyp), total
        out.append((best, best_total))
    return out


def rescored_beams(shared: "SharedOutputs", beams: List[List[TransducerHypothesis]]
                   ) -> List[tuple[List[int], float]]:
    """:func:`rescored` of transducer beams: the search score without the fusion part, which
    is added as it is."""
    fusion = None if shared.fusion is None else [[h.fused for h in beam] for beam in beams]
    return rescored(shared, [[h.tokens for h in beam] for beam in beams],
                    [[h.score - h.fused for h in beam] for beam in beams], fusion)


def rnnt_beam_rescored(shared: "SharedOutputs") -> List[tuple[List[int], float]]:
    return rescored_beams(shared, prefix_beam_nbest(shared))


def _rescored_hypothesis(shared: "SharedOutputs") -> List[TransducerHypothesis]:
    """``rnnt_beam_attn_rescoring``'s choice as the beam's hypothesis (with its frames)."""
    beams = prefix_beam_nbest(shared)
    picked = rescored_beams(shared, beams)
    return [next(h for h in beam if h.tokens == tokens) for beam, (tokens, _) in zip(beams, picked)]


# the modes whose hypotheses carry the encoder frame of each token's emission (token times)
TIMED: dict = {
    "rnnt_greedy_search": greedy_hypotheses,
    "rnnt_beam_search": lambda shared: [beam[0] for beam in prefix_beam_nbest(shared)],
    "modified_beam_search": modified_beam_hypotheses,
    "rnnt_beam_attn_rescoring": _rescored_hypothesis,
}


def ctc_beam_rescored(shared: "SharedOutputs") -> List[tuple[List[int], float]]:
    hyps, scores = shared.nbest()
    return rescored(shared, hyps, scores, shared.fusion_scores())
