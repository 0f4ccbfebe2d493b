"""The searches that need the model's heads: one ``nn.Module`` holding the CTC head, the
attention decoder and the special ids, with every search as a TorchScript-compatible
method.  Eager decoding (:func:`asrkit.decode.batch.decode`) runs these methods as
Python; the exported module (:class:`asrkit.export.ScriptableAsr`) holds a
:class:`Searcher` and ``torch.jit.script`` compiles the same methods."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

from asrkit.decode.attention_search import (AttentionBeamSearch, decoder_inputs, flatten_nbest, group_scores,
                                            pick_rescored, reversed_decoder_inputs, teacher_forced_scores)
from asrkit.decode.ctc_search import (DEFAULT_BLANK_SKIP_THRESHOLD, Hypothesis, apply_blank_penalty,
                                      ctc_greedy_search, ctc_prefix_beam_search_nbest)
from asrkit.models.mask import valid_mask

# (TorchScript cannot read module-level strings: messages are spelled out where raised)


class Searcher(nn.Module):
    """``ctc`` (log-posteriors ``[B, T, V]`` from encoder output, or ``None``) and
    ``decoder`` (``forward(memory, memory_mask, ys_in, ys_in_lengths, r_ys_in,
    memory_index) -> (logits, r_logits)`` and ``forward_one_step``, or ``None``) with the
    ids of ``<blank>`` and ``<eos>`` and the decoder's ``prompt``, the tokens every
    hypothesis starts from (``[<sos>]``; Whisper's ``[sot, language, task, no_timestamps]``;
    the right-to-left decoder's start is ``prompt[0]``).  A method whose head is missing raises
    ``RuntimeError`` ("... needs a CTC head ..." / "... needs an attention decoder ...").
    """

    def __init__(self, ctc: Optional[nn.Module], decoder: Optional[nn.Module], blank: int, prompt: List[int],
                 eos: int, transducer: bool = False):
        super().__init__()
        self.ctc = ctc
        self.decoder = decoder
        # a transducer's searches are asrkit.decode.transducer_search.TransducerSearcher's, over
        # its predictor and joint; this searcher holds neither, only whether the model has them
        self.transducer = bool(transducer)
        self.blank = int(blank)
        self.prompt = [int(t) for t in prompt]
        self.sos = self.prompt[0]
        self.eos = int(eos)
        self.bidirectional = bool(decoder is not None and decoder.has_reverse)
        # the most tokens, prompt included, the decoder has positions for (-1: no limit)
        self.max_tokens = -1 if decoder is None else int(decoder.max_tokens)

    @classmethod
    def of_model(cls, model: nn.Module) -> "Searcher":
        """The searcher of an :class:`asrkit.models.AsrModel` or a transducer (shares its modules)."""
        return cls(model.ctc, model.decoder, model.blank_id, model.decoder_prompt(), model.eos,
                   transducer=getattr(model, "predictor", None) is not None)

    def has_ctc(self) -> bool:
        return self.ctc is not None

    def has_decoder(self) -> bool:
        return self.decoder is not None

    def ctc_log_probs(self, encoder_out: torch.Tensor, blank_penalty: float = 0.0) -> torch.Tensor:
        """CTC log-posteriors ``[B, T, V]`` (fp32), with ``blank_penalty`` applied as
        :func:`asrkit.decode.ctc_search.apply_blank_penalty` (WeNet's; 0: none)."""
        ctc = self.ctc
        if ctc is None:
            raise RuntimeError("CTC log-probabilities need a CTC head; this model has none "
                               "(trained with ctc_weight 0)")
        else:
            return apply_blank_penalty(ctc(encoder_out), self.blank, blank_penalty)

    def ctc_greedy(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> List[List[int]]:
        """:func:`asrkit.decode.ctc_search.ctc_greedy_search` with this model's blank."""
        return ctc_greedy_search(log_probs, lengths, self.blank)

    def ctc_nbest(self, log_probs: torch.Tensor, lengths: torch.Tensor, beam_size: int,
                  blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD
                  ) -> Tuple[List[List[List[int]]], List[List[float]]]:
        """:func:`asrkit.decode.ctc_search.ctc_prefix_beam_search_nbest` with this model's blank."""
        return ctc_prefix_beam_search_nbest(log_probs, lengths, beam_size, self.blank, blank_skip_threshold)

    def attention_beam(self, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor, beam_size: int,
                       length_penalty: float = 0.0) -> Tuple[List[List[int]], List[float]]:
        """Best hypothesis and score per utterance of
        :class:`asrkit.decode.attention_search.AttentionBeamSearch` (incremental decoder
        steps), ranked with WeNet's ``length_penalty`` (see ``AttentionBeamSearch.best``)."""
        decoder = self.decoder
        if decoder is None:
            raise RuntimeError("mode attention needs an attention decoder; this model has none "
                               "(trained with ctc_weight 1)")
        else:
            search = AttentionBeamSearch(encoder_lengths, beam_size, self.prompt, self.eos, self.max_tokens)
            memory_mask = search.memory_mask(encoder_out.size(1))
            cache: Optional[List[torch.Tensor]] = None
            while not search.done():
                logp, new_cache = decoder.forward_one_step(encoder_out, memory_mask, search.ys, cache,
                                                           search.memory_index)
                source = search.advance(logp)
                cache = [c[source] for c in new_cache]
            return search.best(length_penalty)

    def rescoring_scores(self, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor,
                         nbest: List[List[List[int]]], reverse_weight: float) -> List[List[float]]:
        """Decoder score of every n-best hypothesis, ``(1 − rw) · log P_l2r(y <eos> | prompt)
        + rw · log P_r2l(reverse(y) <eos>)`` (``rw = reverse_weight``), all utterances'
        hypotheses in one decoder call."""
        decoder = self.decoder
        if decoder is None:
            raise RuntimeError("mode attention_rescoring needs an attention decoder; this model has none "
                               "(trained with ctc_weight 1)")
        else:
            if reverse_weight > 0.0 and not self.bidirectional:
                raise ValueError("reverse_weight > 0 needs a model with decoder bitransformer")
            flat, owner = flatten_nbest(nbest)
            if len(flat) == 0:
                return group_scores([], nbest)
            device = encoder_out.device
            index = torch.tensor(owner, dtype=torch.long, device=device)
            memory_mask = valid_mask(encoder_lengths[index], encoder_out.size(1)).unsqueeze(1)
            ys_in, ys_out, lengths = decoder_inputs(flat, self.prompt, self.eos, device)
            r_ys_in: Optional[torch.Tensor] = None
            r_ys_out: Optional[torch.Tensor] = None
            if reverse_weight > 0.0:
                r_ys_in, r_ys_out, _ = reversed_decoder_inputs(flat, self.sos, self.eos, device)
            logits, r_logits = decoder(encoder_out, memory_mask, ys_in, lengths, r_ys_in, index)
            score = teacher_forced_scores(logits, ys_out)
            if reverse_weight > 0.0:
                if r_logits is None or r_ys_out is None:
                    raise ValueError("reverse_weight > 0 needs a model with decoder bitransformer")
                else:
                    score = (1.0 - reverse_weight) * score + reverse_weight * teacher_forced_scores(r_logits,
                                                                                                    r_ys_out)
            flat_scores: List[float] = score.tolist()
            return group_scores(flat_scores, nbest)

    def attention_rescoring(self, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor,
                            nbest: List[List[List[int]]], ctc_scores: List[List[float]], ctc_weight: float,
                            reverse_weight: float) -> Tuple[List[List[int]], List[float]]:
        """Per utterance, the n-best entry maximising :meth:`rescoring_scores` +
        ``ctc_weight`` · CTC score (see :func:`asrkit.decode.attention_search.pick_rescored`)."""
        decoder_scores = self.rescoring_scores(encoder_out, encoder_lengths, nbest, reverse_weight)
        return pick_rescored(nbest, ctc_scores, decoder_scores, ctc_weight)


def has_transducer(searcher) -> bool:
    """Whether ``searcher``'s model has a transducer's predictor and joint (getattr: an
    exported archive's scripted searcher, from a CTC/attention model, may predate the flag)."""
    return bool(getattr(searcher, "transducer", False))


# ------------------------------------------------------------------ eager conveniences
# Hypothesis-typed views of the methods above, for Python callers holding a decoder.


def attention_beam_search(decoder: nn.Module, enc_out: torch.Tensor, enc_lengths: torch.Tensor,
                          beam_size: int, prompt: Sequence[int], eos: int, length_penalty: float = 0.0
                          ) -> list[Hypothesis]:
    """:meth:`Searcher.attention_beam` as one :class:`Hypothesis` per utterance (``prompt``:
    the decoder's, ``model.decoder_prompt()``)."""
    hyps, scores = Searcher(None, decoder, 0, list(prompt), eos).attention_beam(enc_out, enc_lengths, beam_size,
                                                                       length_penalty)
    return [Hypothesis(tuple(h), s) for h, s in zip(hyps, scores)]


def rescoring_scores(decoder: nn.Module, enc_out: torch.Tensor, enc_lengths: torch.Tensor,
                     nbest: Sequence[Sequence[Hypothesis]], prompt: Sequence[int], eos: int, reverse_weight: float
                     ) -> list[list[float]]:
    """:meth:`Searcher.rescoring_scores` of :class:`Hypothesis` n-best lists."""
    lists = [[list(h.tokens) for h in hyps] for hyps in nbest]
    return Searcher(None, decoder, 0, list(prompt), eos).rescoring_scores(enc_out, enc_lengths, lists, reverse_weight)


def attention_rescoring(decoder: nn.Module, enc_out: torch.Tensor, enc_lengths: torch.Tensor,
                        nbest: Sequence[Sequence[Hypothesis]], prompt: Sequence[int], eos: int, ctc_weight: float,
                        reverse_weight: float) -> list[Hypothesis]:
    """:meth:`Searcher.attention_rescoring` of :class:`Hypothesis` n-best lists (their
    ``score`` is the CTC score); returns the best per utterance with its total score."""
    lists = [[list(h.tokens) for h in hyps] for hyps in nbest]
    ctc_scores = [[h.score for h in hyps] for hyps in nbest]
    hyps, totals = Searcher(None, decoder, 0, list(prompt), eos).attention_rescoring(enc_out, enc_lengths, lists,
                                                                            ctc_scores, ctc_weight, reverse_weight)
    return [Hypothesis(tuple(h), s) for h, s in zip(hyps, totals)]
