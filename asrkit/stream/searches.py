"""The searches a stream runs over its segment's encoder frames, chunk after chunk: each
gives a partial result after every chunk, the blank probability of every frame (what
endpointing reads) and the segment's final result.

* :class:`CtcStreamSearch` -- the incremental CTC prefix beam search; the final result is
  attention rescoring of its n-best over all of the segment's frames (``ctc_weight``,
  ``reverse_weight``), or its best prefix without a decoder.
* :class:`TransducerStreamSearch` -- the transducer search the mode makes
  (:attr:`asrkit.decode.modes.Streaming.search`: one of :mod:`asrkit.decode.transducer_search`),
  the predictor state carried across chunks; the final result is its best hypothesis, or what
  the mode's :attr:`~asrkit.decode.modes.Streaming.final` gives over all of the segment's
  frames (the rescoring of ``rnnt_beam_attn_rescoring`` and ``ctc_beam_td_attn_rescoring``).

Which of the two a mode streams with is its :attr:`asrkit.decode.modes.DecodingMode.stream`
(:data:`STREAM_SEARCHES`).

Either way a segment's final result equals what decoding the same encoder frames offline in
that mode gives (the searches are fed frame by frame; ``tests/stream``), with the stream's
LM and context graph (:mod:`asrkit.decode.fusion`) when it has them: partial results rank
the prefixes as if they ended there."""
from __future__ import annotations

from typing import Optional

import torch

from asrkit.decode.attention_search import pick_rescored, rank_rescored
from asrkit.decode.ctc_search import PrefixBeamSearch
from asrkit.decode.fusion import Fusion
from asrkit.decode.modes import REGISTRY, ModeError
from asrkit.decode.options import DecodingOptions
from asrkit.decode.searcher import Searcher
from asrkit.decode.shared import SharedOutputs, transducer_parts
from asrkit.decode.transducer_search import TransducerPrefixBeamSearch


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
        self.streaming = REGISTRY[options.modes[0]].stream
        self.search = self.streaming.search(transducer_parts(model)[0], next(model.parameters()).device, options,
                                            fusion)

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
        if encoder_out is None or self.streaming.final is None:
            return list(self.search.best().tokens)
        shared = SharedOutputs.from_options(self.searcher, encoder_out, torch.tensor([encoder_out.size(1)]),
                                            self.options, self.model, self.fusion)
        return list(self.streaming.final(shared, self.search))


# the stream search of each kind of mode (asrkit.decode.modes.Streaming.kind)
STREAM_SEARCHES = {"ctc": CtcStreamSearch, "transducer": TransducerStreamSearch}


def streamed_modes() -> list[str]:
    """The registered modes a stream runs (those with a :attr:`~asrkit.decode.modes.DecodingMode.stream`
    of a kind in :data:`STREAM_SEARCHES`), in registration order."""
    return [name for name, mode in REGISTRY.items() if mode.stream is not None and mode.stream.kind in STREAM_SEARCHES]


def stream_search(model, searcher: Searcher, options: DecodingOptions, fusion: Optional[Fusion] = None):
    """The search of a new segment in ``options.modes[0]`` (its
    :attr:`~asrkit.decode.modes.DecodingMode.stream`); ``fusion``: the stream's LM and context
    graph (:func:`asrkit.decode.options.build_fusion`).  A mode no stream runs raises
    :class:`asrkit.decode.modes.ModeError`."""
    mode = options.modes[0]
    if mode not in streamed_modes():
        raise ModeError(f"mode {mode} has no streaming search; stream with one of {', '.join(streamed_modes())}")
    return STREAM_SEARCHES[REGISTRY[mode].stream.kind](model, searcher, options, fusion)
