"""The transducer's decoding modes, with WeNet's names and options, run per utterance on the
encoder output every mode of a batch shares (:class:`asrkit.decode.shared.SharedOutputs`);
registered in :mod:`asrkit.decode.modes`.

* ``rnnt_greedy_search`` -- :class:`~asrkit.decode.transducer_search.TransducerGreedySearch`
  (up to :data:`~asrkit.decode.transducer_search.MAX_SYMBOLS_PER_FRAME` symbols per frame,
  WeNet's ``n_steps``).
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

The beam searches here are the search classes fed a whole utterance (the greedy search:
:meth:`~asrkit.decode.transducer_search.TransducerSearcher.greedy_best`); a stream feeds the
same classes chunk by chunk (:func:`greedy_search`, :func:`prefix_beam_search`,
:func:`modified_beam_search` make them from the options; :mod:`asrkit.stream.searches`).
"""
from __future__ import annotations

from typing import List, Optional

import torch

from asrkit.decode.shared import SharedOutputs
from asrkit.decode.transducer_search import (MAX_SYMBOLS_PER_FRAME, ModifiedBeamSearch, TransducerGreedySearch,
                                             TransducerHypothesis, TransducerPrefixBeamSearch)


# Each transducer mode's search class, made from the options (for a stream: DecodingMode.stream):
# ``searcher``, a TransducerSearcher or an exported archive's scripted one; ``device``, where the
# encoder frames are; ``options``, whatever holds the DecodingOptions fields read (the options,
# or the SharedOutputs that copy them); ``fusion``, the LM and phrases.


def greedy_search(searcher, device: torch.device, options, fusion=None) -> TransducerGreedySearch:
    """``rnnt_greedy_search``'s search; it reads none of ``options`` and takes no LM or phrases."""
    return TransducerGreedySearch(searcher, device, max_symbols_per_frame=MAX_SYMBOLS_PER_FRAME)


def prefix_beam_search(searcher, device: torch.device, options, fusion=None) -> TransducerPrefixBeamSearch:
    """``rnnt_beam_search``'s search: ``options.beam_size``, ``options.search_ctc_weight`` and
    ``options.search_transducer_weight`` (:class:`asrkit.decode.options.DecodingOptions`), with
    ``fusion``."""
    return TransducerPrefixBeamSearch(searcher, device, beam_size=options.beam_size,
                                      ctc_weight=options.search_ctc_weight,
                                      transducer_weight=options.search_transducer_weight, fusion=fusion)


def modified_beam_search(searcher, device: torch.device, options, fusion=None) -> ModifiedBeamSearch:
    """``modified_beam_search``'s search: ``options.beam_size``, with ``fusion``."""
    return ModifiedBeamSearch(searcher, device, beam_size=options.beam_size, fusion=fusion)


def _utterances(shared: SharedOutputs):
    """``(b, encoder frames [T_b, E])`` of every utterance of the batch."""
    for b, n in enumerate(shared.encoder_lengths.tolist()):
        yield b, shared.encoder_out[b, :n]


def greedy_hypotheses(shared: SharedOutputs) -> List[TransducerHypothesis]:
    """The ``rnnt_greedy_search`` hypothesis of every utterance
    (:meth:`~asrkit.decode.transducer_search.TransducerSearcher.greedy_best`: what an archive's
    scripted searcher also answers, where a greedy search's state would not come back)."""
    transducer = shared.transducer
    if not hasattr(transducer, "greedy_best"):  # (an archive exported before it: its search by mode name)
        return transducer.best_per_utterance("rnnt_greedy_search", shared.encoder_out, shared.encoder_lengths, None,
                                             shared.beam_size, 0.0, 1.0, MAX_SYMBOLS_PER_FRAME)
    return transducer.greedy_best(shared.encoder_out, shared.encoder_lengths, MAX_SYMBOLS_PER_FRAME)


def prefix_beam_nbest(shared: SharedOutputs) -> List[List[TransducerHypothesis]]:
    """The ``rnnt_beam_search`` beam of every utterance, best first."""
    with_ctc = shared.search_ctc_weight > 0
    log_probs = shared.log_probs() if with_ctc else None
    out = []
    for b, enc in _utterances(shared):
        search = prefix_beam_search(shared.transducer, enc.device, shared, shared.fusion)
        search.feed(enc, log_probs[b, :enc.size(0)] if log_probs is not None else None)
        out.append(search.nbest())
    return out


def modified_beam_hypotheses(shared: SharedOutputs) -> List[TransducerHypothesis]:
    """The ``modified_beam_search`` hypothesis of every utterance (with :attr:`SharedOutputs.fusion`)."""
    out = []
    for _, enc in _utterances(shared):
        search = modified_beam_search(shared.transducer, enc.device, shared, shared.fusion)
        search.feed(enc)
        out.append(search.best())
    return out


def transducer_log_likelihoods(shared: SharedOutputs, b: int, hyps: List[List[int]]) -> List[float]:
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


def rescored(shared: SharedOutputs, nbest: List[List[List[int]]], search_scores: List[List[float]],
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


def rescored_beams(shared: SharedOutputs, beams: List[List[TransducerHypothesis]]
                   ) -> List[tuple[List[int], float]]:
    """:func:`rescored` of transducer beams: the search score without the fusion part, which
    is added as it is."""
    fusion = None if shared.fusion is None else [[h.fused for h in beam] for beam in beams]
    return rescored(shared, [[h.tokens for h in beam] for beam in beams],
                    [[h.score - h.fused for h in beam] for beam in beams], fusion)


def rnnt_beam_rescored(shared: SharedOutputs) -> List[tuple[List[int], float]]:
    return rescored_beams(shared, prefix_beam_nbest(shared))


def rescored_hypotheses(shared: SharedOutputs) -> List[TransducerHypothesis]:
    """``rnnt_beam_attn_rescoring``'s choice as the beam's hypothesis (with its frames)."""
    beams = prefix_beam_nbest(shared)
    picked = rescored_beams(shared, beams)
    return [next(h for h in beam if h.tokens == tokens) for beam, (tokens, _) in zip(beams, picked)]


def best_of_prefix_beam(shared: SharedOutputs) -> List[TransducerHypothesis]:
    """The best of each utterance's ``rnnt_beam_search`` beam (with its frames)."""
    return [beam[0] for beam in prefix_beam_nbest(shared)]


def rescored_stream(shared: SharedOutputs, search: TransducerPrefixBeamSearch) -> List[int]:
    """``rnnt_beam_attn_rescoring``'s result of a segment whose beam ``search`` searched
    chunk by chunk: that beam is the n-best ``shared`` (the segment's frames) rescores."""
    return rescored_beams(shared, [search.nbest()])[0][0]


def ctc_beam_rescored(shared: SharedOutputs) -> List[tuple[List[int], float]]:
    hyps, scores = shared.nbest()
    return rescored(shared, hyps, scores, shared.fusion_scores())
