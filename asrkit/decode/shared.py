"""What the decoding modes of one batch share (:class:`SharedOutputs`): one encoder pass, one
CTC log-softmax and one prefix-beam n-best, each computed on first use; the modes
themselves (:mod:`asrkit.decode.modes`) run on it."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Optional, Tuple

import torch

from asrkit.decode.ctc_search import ctc_prefix_beam_search_fused
from asrkit.decode.searcher import Searcher, has_transducer
from asrkit.decode.transducer_search import TransducerSearcher


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


@dataclasses.dataclass
class SharedOutputs:
    """What the modes of one batch share: the encoder output, and -- computed on first
    use, then reused -- the CTC log-posteriors (``blank_penalty`` applied: every CTC mode
    and the CTC scores of ``attention_rescoring`` see it, as in WeNet) and the
    prefix-beam n-best.  The search settings are those of
    :class:`asrkit.decode.options.DecodingOptions`, whose fields they copy
    (:meth:`from_options`); ``length_penalty`` ranks the ``attention`` mode's hypotheses
    (WeNet's; ``attention_rescoring`` does not use it)."""

    searcher: Searcher
    encoder_out: torch.Tensor
    encoder_lengths: torch.Tensor
    beam_size: int
    ctc_weight: float
    reverse_weight: float
    blank_skip_threshold: float
    length_penalty: float
    blank_penalty: float
    # the transducer modes (asrkit.decode.transducer_modes): WeNet's search and rescoring weights
    search_ctc_weight: float
    search_transducer_weight: float
    transducer_weight: float
    attn_weight: float
    # the transducer modes: the searcher over the model's predictor and joint, and the
    # per-utterance RNN-T loss (the rescoring modes; an exported archive has none)
    transducer: Optional[Any] = None
    rnnt_loss: Optional[Callable[..., torch.Tensor]] = None
    # LM fusion and context biasing (asrkit.decode.fusion.Fusion; None: neither) of the modes
    # that take them (DecodingMode.fused)
    fusion: Optional[Any] = None
    _log_probs: Optional[torch.Tensor] = None
    _nbest: Optional[Tuple[List[List[List[int]]], List[List[float]]]] = None
    _fusion_scores: Optional[List[List[float]]] = None

    @classmethod
    def from_options(cls, searcher: Searcher, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor,
                     options, model: Optional[Any] = None, fusion: Optional[Any] = None) -> "SharedOutputs":
        """The shared outputs of one encoder pass, searched with ``options`` (a
        :class:`asrkit.decode.options.DecodingOptions`); ``model``: what the transducer modes
        need (:func:`transducer_parts`: the model, or an exported archive's scripted module);
        ``fusion``: the :func:`asrkit.decode.options.build_fusion` of ``options`` (``None`` when
        they ask for no LM and no biasing)."""
        transducer, rnnt_loss = transducer_parts(model) if has_transducer(searcher) else (None, None)
        return cls(searcher, encoder_out, encoder_lengths, beam_size=options.beam_size,
                   ctc_weight=options.ctc_weight, reverse_weight=options.reverse_weight,
                   blank_skip_threshold=options.blank_skip_threshold, length_penalty=options.length_penalty,
                   blank_penalty=options.blank_penalty,
                   search_ctc_weight=options.search_ctc_weight,
                   search_transducer_weight=options.search_transducer_weight,
                   transducer_weight=options.transducer_weight, attn_weight=options.attn_weight,
                   transducer=transducer, rnnt_loss=rnnt_loss, fusion=fusion)

    def log_probs(self) -> torch.Tensor:
        if self._log_probs is None:
            self._log_probs = self.searcher.ctc_log_probs(self.encoder_out, self.blank_penalty)
        return self._log_probs

    def nbest(self) -> Tuple[List[List[List[int]]], List[List[float]]]:
        """``(hypotheses, CTC scores)`` per utterance, ``beam_size`` at most, best first (with
        :attr:`fusion`: by CTC score + :meth:`fusion_scores`)."""
        if self._nbest is None:
            if self.fusion is None:
                self._nbest = self.searcher.ctc_nbest(self.log_probs(), self.encoder_lengths, self.beam_size,
                                                      self.blank_skip_threshold)
            else:
                hyps, ctc, fused = ctc_prefix_beam_search_fused(self.log_probs(), self.encoder_lengths,
                                                                self.beam_size, self.searcher.blank,
                                                                self.blank_skip_threshold, self.fusion)
                self._nbest, self._fusion_scores = (hyps, ctc), fused
        return self._nbest

    def fusion_scores(self) -> Optional[List[List[float]]]:
        """Per n-best hypothesis, the LM and context score :attr:`fusion` gave it (ended);
        ``None`` without fusion."""
        self.nbest()
        return self._fusion_scores
