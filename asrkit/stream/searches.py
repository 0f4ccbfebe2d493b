"""The searches a stream runs over its segment's encoder frames, chunk after chunk: each
gives a partial result after every chunk, the blank probability of every frame (what
endpointing reads) and the segment's final result.

* :class:`CtcStreamSearch` -- the incremental CTC prefix beam search; the final result is
  attention rescoring of its n-best over all of the segment's frames (``ctc_weight``,
  ``reverse_weight``), or its best prefix without a decoder.
* :class:`TransducerStreamSearch` -- a transducer search of :mod:`asrkit.decode.transducer_search`
  (picked by the mode: ``rnnt_greedy_search``, ``modified_beam_search``, else WeNet's prefix
  beam search), the predictor state carried across chunks; the final result is its best
  hypothesis, or for ``rnnt_beam_attn_rescoring`` / ``ctc_beam_td_attn_rescoring`` the
  rescoring of the mode over all of the segment's frames.

Either way a segment's final result equals what decoding the same encoder frames offline in
that mode gives (the searches are fed frame by frame; ``tests/stream``), with the stream's
LM and context graph (:mod:`asrkit.decode.fusion`) when it has them: partial results rank
the prefixes as if they ended there."""
from __future__ import annotations

from typing import Optional

import torch

from asrkit.decode import transducer_modes as td
from asrkit.decode.attention_search import pick_rescored, rank_rescored
from asrkit.decode.ctc_search import PrefixBeamSearch
from asrkit.decode.fusion import Fusion
from asrkit.decode.modes import REGISTRY, TRANSDUCER, SharedOutputs
from asrkit.decode.options import DecodingOptions
from asrkit.decode.searcher import Searcher
from asrkit.decode.transducer_search import ModifiedBeamSearch, TransducerGreedySearch, TransducerPrefixBeamSearch


class CtcStreamSearch:
    def __init__(self, model, searcher: Searcher, options: DecodingOptions, fusion: Optional[Fusion] = None):
        self.searcher, self.options, self.fusion = searcher, options, fusion
        self.search = PrefixBeamSearch(options.beam_size, searcher.blank, model.vocab_size, 1.0, fusion)

    def feed(self, encoder_out: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """``(partial tokens, blank probability per frame)`` after ``encoder_out [1, T, D]``;
        :attr:`partial_nbest`: the kept prefixes, best first."""
        log_probs = self.searcher.ctc_log_probs(encoder_out)[0]
        self.search.feed(log_probs)
        self.partial_nbest = [list(h) for h in self.search.nbest()[0]]
        return self.partial_nbest[0], log_probs[:, self.searcher.blank].exp()

    def final(self, encoder_out: Optional[torch.Tensor]) -> list[int]:
        """The segment's result, ``encoder_out [1, T, D]`` all of its frames (None: none)."""
        hyps, ctc_scores, fusion_scores = self.search.nbest_fused()
        if encoder_out is None or not self.searcher.has_decoder():
            return list(hyps[0])
        lengths = torch.tensor([encoder_out.size(1)])
        if self.fusion is None:
            best, _ = self.searcher.attention_rescoring(encoder_out, lengths, [hyps], [ctc_scores],
                                                        self.options.ctc_weight, self.options.reverse_weight)
        else:
            decoder_scores = self.searcher.rescoring_scores(encoder_out, lengths, [hyps], self.options.reverse_weight)
            best, _ = pick_rescored([hyps], [ctc_scores], decoder_scores, self.options.ctc_weight, [fusion_scores])
        return list(best[0])

    def final_nbest(self, encoder_out: Optional[torch.Tensor]) -> list[list[int]]:
        """The segment's hypotheses ranked as :meth:`final` ranks them (its result first; ties:
        the earlier kept), e.g. for a server's n-best."""
        hyps, ctc_scores, fusion_scores = self.search.nbest_fused()
        if encoder_out is None or not self.searcher.has_decoder():
            return [list(h) for h in hyps] or [[]]
        lengths = torch.tensor([encoder_out.size(1)])
        decoder_scores = self.searcher.rescoring_scores(encoder_out, lengths, [hyps], self.options.reverse_weight)
        return rank_rescored([hyps], [ctc_scores], decoder_scores, self.options.ctc_weight,
                             [fusion_scores] if self.fusion is not None else None)[0]


class TransducerStreamSearch:
    def __init__(self, model, searcher: Searcher, options: DecodingOptions, fusion: Optional[Fusion] = None):
        self.model, self.searcher, self.options, self.fusion = model, searcher, options, fusion
        self.mode = options.modes[0]
        args = (td.transducer_parts(model)[0], next(model.parameters()).device)
        if self.mode == "rnnt_greedy_search":
            self.search = TransducerGreedySearch(*args, max_symbols_per_frame=td.MAX_SYMBOLS_PER_FRAME)
        elif self.mode == "modified_beam_search":
            self.search = ModifiedBeamSearch(*args, beam_size=options.beam_size, fusion=fusion)
        else:
            self.search = TransducerPrefixBeamSearch(*args, beam_size=options.beam_size,
                                                     ctc_weight=options.search_ctc_weight,
                                                     transducer_weight=options.search_transducer_weight,
                                                     fusion=fusion)

    def feed(self, encoder_out: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """``(partial tokens, blank probability per frame)`` after ``encoder_out [1, T, D]``."""
        if isinstance(self.search, TransducerPrefixBeamSearch):
            ctc = self.searcher.ctc_log_probs(encoder_out)[0] if self.search.ctc_weight > 0 else None
            blank_probs = self.search.feed(encoder_out[0], ctc)
        else:
            blank_probs = self.search.feed(encoder_out[0])
        return list(self.search.best().tokens), torch.tensor(blank_probs)

    def final(self, encoder_out: Optional[torch.Tensor]) -> list[int]:
        """The segment's result, ``encoder_out [1, T, D]`` all of its frames (None: none)."""
        if encoder_out is None or self.mode not in ("rnnt_beam_attn_rescoring", "ctc_beam_td_attn_rescoring"):
            return list(self.search.best().tokens)
        shared = SharedOutputs.from_options(self.searcher, encoder_out, torch.tensor([encoder_out.size(1)]),
                                            self.options, self.model, self.fusion)
        if self.mode == "rnnt_beam_attn_rescoring":  # (the beam searched chunk by chunk is the n-best)
            return td.rescored_beams(shared, [self.search.nbest()])[0][0]
        return list(REGISTRY[self.mode].run(shared)[0])


def stream_search(model, searcher: Searcher, options: DecodingOptions, fusion: Optional[Fusion] = None):
    """The search of a new segment: a transducer's for a transducer mode, else CTC's;
    ``fusion``: the stream's LM and context graph (:func:`asrkit.decode.fusion.build_fusion`)."""
    if TRANSDUCER in REGISTRY[options.modes[0]].needs:
        return TransducerStreamSearch(model, searcher, options, fusion)
    return CtcStreamSearch(model, searcher, options, fusion)
