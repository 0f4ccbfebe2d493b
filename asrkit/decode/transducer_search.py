"""The transducer (RNN-T) searches, over one utterance's encoder output, fed frame by frame.

Each search is a class whose :meth:`feed` takes encoder frames ``[T, E]`` -- a whole
utterance, or one streaming chunk after another (the state carries over: the hypotheses,
their predictor states and scores) -- and answers for the frames fed so far:

* :class:`TransducerGreedySearch` -- WeNet's ``greedy_search``: at each frame the argmax of
  the joint's log-softmax; a non-blank symbol is emitted, the predictor advances on it and
  the search stays on the frame, up to ``max_symbols_per_frame`` symbols (WeNet's
  ``n_steps``); a blank moves to the next frame.
* :class:`TransducerPrefixBeamSearch` -- WeNet's ``rnnt_beam_search``
  (``PrefixBeamSearch.prefix_beam_search``): **one symbol at most per frame**; every
  hypothesis is extended by its ``beam`` best units under
  ``log(transducer_weight · P_joint + ctc_weight · P_ctc)`` (a blank keeps the hypothesis and
  its predictor state); hypotheses with equal tokens are merged by log-add; the ``beam`` best
  are kept.
* :class:`ModifiedBeamSearch` -- icefall's ``modified_beam_search``: also one symbol at most
  per frame, but the ``beam`` best (hypothesis, unit) pairs are chosen over the whole beam at
  once (a hypothesis can have several children or none), equal token sequences merged by
  log-add; the result is the hypothesis with the best score per token, the leading ``<blank>``
  counted (icefall's ``get_most_probable(length_norm=True)``).

The predictor API they use (``asrkit.models.transducer``, WeNet's): ``init_state(batch,
device)``, ``forward_step(tokens [N, 1], padding [N, 1], state) -> (out [N, 1, P], state)``,
``cache_to_batch`` / ``batch_to_cache``; ``joint(enc [N, 1, E], pred [N, 1, P]) -> [N, 1, 1, V]``
raw logits.  A hypothesis holds the predictor state *before* its last token (the predictor
starts from ``<blank>``, as WeNet's ``add_blank`` in training): its next distribution is one
``forward_step`` of that token, so a blank extension costs no predictor step.

Every search records the encoder frame of each token it emits (``frames``), which the
timestamps of :mod:`asrkit.transcribe` use.

One implementation: the searches are the methods of :class:`TransducerSearcher`, an
``nn.Module`` holding the predictor and joint in TorchScript's subset, which the exported
archive (:mod:`asrkit.export.torchscript`) compiles; the search classes below keep one
search's state between :meth:`feed` calls and call those methods.
"""
# (no ``from __future__ import annotations``: TorchScript reads the annotations as typing objects)
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from asrkit.decode.ctc_search import log_add
from asrkit.decode.fusion import Fusion
from asrkit.decode.search_defaults import DEFAULT_SEARCH_CTC_WEIGHT, DEFAULT_SEARCH_TRANSDUCER_WEIGHT
from asrkit.decode.transducer_hypothesis import TransducerHypothesis, finalized, fuse_child

# rnnt_greedy_search's symbols a frame at most: WeNet's greedy_search n_steps
MAX_SYMBOLS_PER_FRAME = 64


def _key(tokens: List[int]) -> str:
    return ",".join([str(t) for t in tokens])


def _child(hyp: TransducerHypothesis, unit: int, blank: int, frame: int, score: float,
           state_after: List[torch.Tensor]) -> TransducerHypothesis:
    """``hyp`` extended by ``unit`` at encoder ``frame`` with ``score``: a blank keeps its
    tokens and predictor state; any other unit is appended, its state the one after ``last``."""
    if unit == blank:
        return TransducerHypothesis(list(hyp.tokens), list(hyp.frames), score, hyp.last, hyp.state)
    return TransducerHypothesis(hyp.tokens + [unit], hyp.frames + [frame], score, unit, state_after)


def _merge(children: List[TransducerHypothesis]) -> List[TransducerHypothesis]:
    """``children`` with equal token sequences merged by log-add of their scores, in order of
    first appearance (the first keeps its state and frames)."""
    merged: List[TransducerHypothesis] = []
    index: Dict[str, int] = {}
    for child in children:
        key = _key(child.tokens)
        if key in index:
            kept = merged[index[key]]
            kept.score = log_add(kept.score, child.score)
        else:
            index[key] = len(merged)
            merged.append(child)
    return merged


def score_per_token(hyp: TransducerHypothesis) -> float:
    """``score / (tokens + 1)``: icefall's length normalisation, whose token sequence counts
    the leading ``<blank>`` (a stateless predictor of context 1)."""
    return hyp.score / (len(hyp.tokens) + 1)


def best_by_score_per_token(beam: List[TransducerHypothesis]) -> TransducerHypothesis:
    """The first hypothesis of ``beam`` with the highest :func:`score_per_token`."""
    best = beam[0]
    for hyp in beam:
        if score_per_token(hyp) > score_per_token(best):
            best = hyp
    return best



class TransducerSearcher(nn.Module):
    """The transducer searches over a model's ``predictor`` and ``joint`` (module docstring),
    each a method feeding encoder frames ``[T, E]`` to the state it is given (a hypothesis
    or a beam, updated or returned) and returning each frame's blank probability; and the
    whole-utterance search of each transducer mode over a batch, for an exported archive."""

    def __init__(self, predictor: nn.Module, joint: nn.Module, blank: int, one_symbol_per_frame: bool = False):
        super().__init__()
        self.predictor = predictor
        self.joint = joint
        self.blank = int(blank)
        # a model trained in the modified lattice (one output per frame) is searched so: the
        # greedy search's symbols per frame are capped at 1 whatever the caller asks
        self.max_symbols = 1 if one_symbol_per_frame else 1 << 30

    @classmethod
    def of_model(cls, model: nn.Module) -> "TransducerSearcher":
        """The searcher of a transducer (shares its predictor and joint; one symbol per frame
        for ``rnnt_type: modified``)."""
        return cls(model.predictor, model.joint, model.blank_id, getattr(model, "rnnt_type", "regular") == "modified")

    def forward(self, encoder_out: torch.Tensor, max_symbols: int = MAX_SYMBOLS_PER_FRAME) -> List[int]:
        """Greedy search (``max_symbols`` symbols a frame at most) over one utterance's ``[T, E]``."""
        hyp = self.initial(encoder_out.device)
        self.greedy_feed(hyp, encoder_out, 0, max_symbols)
        return hyp.tokens

    @torch.jit.export
    def initial(self, device: torch.device) -> TransducerHypothesis:
        """The empty hypothesis: score 0, the predictor's initial state, ``<blank>`` to read."""
        return TransducerHypothesis(torch.jit.annotate(List[int], []), torch.jit.annotate(List[int], []), 0.0,
                                    self.blank, self.predictor.init_state(1, device))

    def _step(self, hyps: List[TransducerHypothesis], frame: torch.Tensor
              ) -> Tuple[torch.Tensor, List[List[torch.Tensor]]]:
        """Joint log-probabilities ``[N, V]`` (fp32) of encoder ``frame [E]`` with each of
        ``hyps``' predictor outputs, and each hypothesis' state after its last token."""
        n = len(hyps)
        device = frame.device
        tokens = torch.tensor([[h.last] for h in hyps], dtype=torch.long, device=device)
        padding = torch.zeros(n, 1, device=device)
        state = self.predictor.cache_to_batch([h.state for h in hyps])
        pred_out, new_state = self.predictor.forward_step(tokens, padding, state)
        logits = self.joint(frame.view(1, 1, -1).expand(n, 1, -1), pred_out)  # [N, 1, 1, V]
        return logits.reshape(n, -1).float().log_softmax(dim=-1), self.predictor.batch_to_cache(new_state)

    @torch.jit.export
    def greedy_feed(self, hyp: TransducerHypothesis, encoder_out: torch.Tensor, frames_fed: int,
                    max_symbols: int) -> List[float]:
        """WeNet's greedy search over the next frames (``frames_fed`` fed before), extending
        ``hyp`` in place, at most ``max_symbols`` symbols a frame (1 for a model trained one
        output per frame); each frame's blank probability after its last symbol."""
        blank_probs: List[float] = []
        device = encoder_out.device
        max_symbols = min(max_symbols, self.max_symbols)
        for t in range(encoder_out.size(0)):
            frame = encoder_out[t].view(1, 1, -1)
            blank_prob = 0.0
            for _ in range(max_symbols):
                if len(hyp.pred_out) == 0:
                    tokens = torch.tensor([[hyp.last]], dtype=torch.long, device=device)
                    out, after = self.predictor.forward_step(tokens, torch.zeros(1, 1, device=device), hyp.state)
                    hyp.pred_out = [out]
                    hyp.state_after = after
                logp = self.joint(frame, hyp.pred_out[0]).reshape(-1).float().log_softmax(dim=-1)
                best = int(logp.argmax())
                blank_prob = float(logp[self.blank].exp())
                if best == self.blank:
                    break
                hyp.tokens.append(best)
                hyp.frames.append(frames_fed + t)
                hyp.last = best
                hyp.state = hyp.state_after
                hyp.pred_out = []
            blank_probs.append(blank_prob)
        return blank_probs

    @torch.jit.export
    def prefix_beam_feed(self, beam: List[TransducerHypothesis], encoder_out: torch.Tensor,
                         ctc_log_probs: Optional[torch.Tensor], frames_fed: int, beam_size: int, ctc_weight: float,
                         transducer_weight: float, fusion: Optional[Fusion] = None
                         ) -> Tuple[List[TransducerHypothesis], List[float]]:
        """WeNet's prefix beam search over the next frames: the new beam (best first) and
        each frame's joint blank probability for the best hypothesis before it.  With
        ``fusion``, each non-blank extension's score also gets its fusion score (ranked
        with it); the beam is not finalized (:func:`finalized`)."""
        blank_probs: List[float] = []
        for t in range(encoder_out.size(0)):
            logp, states_after = self._step(beam, encoder_out[t])
            blank_probs.append(float(logp[0, self.blank].exp()))  # (the beam is sorted: 0 is the best)
            probs = transducer_weight * logp.exp()
            if ctc_log_probs is not None and ctc_weight > 0:
                probs = probs + ctc_weight * ctc_log_probs[t].float().exp().unsqueeze(0)
            top_logp, top_units = probs.log().topk(beam_size, dim=-1)
            scores = torch.tensor([h.score for h in beam], dtype=torch.float32).unsqueeze(1) + top_logp
            children: List[TransducerHypothesis] = []
            for j in range(len(beam)):
                for k in range(beam_size):
                    unit = int(top_units[j, k])
                    children.append(fuse_child(_child(beam[j], unit, self.blank, frames_fed + t, float(scores[j, k]),
                                                 states_after[j]), beam[j], unit, self.blank, fusion))
            merged = _merge(children)
            order = torch.tensor([h.score for h in merged], dtype=torch.float64)
            ranked = torch.sort(order, descending=True, stable=True)[1][:beam_size]
            beam = [merged[int(i)] for i in ranked]
        return beam, blank_probs

    # The whole-utterance search of each transducer mode an exported archive runs, over a batch
    # (its decode: asrkit.export.torchscript).  Eager decoding runs greedy_best too -- a scripted
    # searcher's greedy_feed changes a hypothesis that Python only holds a copy of -- and feeds
    # the beam searches' classes below (asrkit.decode.transducer_modes).
    @torch.jit.export
    def greedy_best(self, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor, max_symbols: int
                    ) -> List[TransducerHypothesis]:
        """``rnnt_greedy_search``: :meth:`greedy_feed` over each utterance of ``encoder_out [B, T, E]``."""
        results: List[TransducerHypothesis] = []
        for b in range(encoder_out.size(0)):
            enc = encoder_out[b, :int(encoder_lengths[b])]
            hyp = self.initial(enc.device)
            self.greedy_feed(hyp, enc, 0, max_symbols)
            results.append(hyp)
        return results

    @torch.jit.export
    def prefix_beam_best(self, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor,
                         ctc_log_probs: Optional[torch.Tensor], beam_size: int, ctc_weight: float,
                         transducer_weight: float) -> List[TransducerHypothesis]:
        """``rnnt_beam_search``: the best of :meth:`prefix_beam_feed`'s beam for each utterance
        of ``encoder_out [B, T, E]`` (``ctc_log_probs [B, T, V]`` read when ``ctc_weight > 0``)."""
        results: List[TransducerHypothesis] = []
        for b in range(encoder_out.size(0)):
            enc = encoder_out[b, :int(encoder_lengths[b])]
            ctc: Optional[torch.Tensor] = None
            if ctc_log_probs is not None and ctc_weight > 0:
                ctc = ctc_log_probs[b, :enc.size(0)]
            beam = self.prefix_beam_feed([self.initial(enc.device)], enc, ctc, 0, beam_size, ctc_weight,
                                         transducer_weight, None)[0]  # (TorchScript fills in no defaults)
            results.append(beam[0])
        return results

    @torch.jit.export
    def modified_beam_best(self, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor, beam_size: int
                           ) -> List[TransducerHypothesis]:
        """``modified_beam_search``: the best of :meth:`modified_beam_feed`'s beam by
        :func:`score_per_token` for each utterance of ``encoder_out [B, T, E]``."""
        results: List[TransducerHypothesis] = []
        for b in range(encoder_out.size(0)):
            enc = encoder_out[b, :int(encoder_lengths[b])]
            beam = self.modified_beam_feed([self.initial(enc.device)], enc, 0, beam_size, None)[0]
            results.append(best_by_score_per_token(beam))
        return results

    @torch.jit.export
    def modified_beam_feed(self, beam: List[TransducerHypothesis], encoder_out: torch.Tensor, frames_fed: int,
                           beam_size: int, fusion: Optional[Fusion] = None
                           ) -> Tuple[List[TransducerHypothesis], List[float]]:
        """icefall's modified beam search over the next frames: the new beam (unordered) and
        each frame's joint blank probability for the highest-scoring hypothesis before it.
        With ``fusion``, a chosen non-blank extension's score also gets its fusion score (as
        icefall adds its context score: after the choice); the beam is not finalized."""
        blank_probs: List[float] = []
        for t in range(encoder_out.size(0)):
            logp, states_after = self._step(beam, encoder_out[t])
            scores = torch.tensor([h.score for h in beam], dtype=torch.float32)
            blank_probs.append(float(logp[int(scores.argmax()), self.blank].exp()))
            totals = logp + scores.unsqueeze(1)
            vocab = totals.size(1)
            top_scores, top_flat = totals.reshape(-1).topk(min(beam_size, totals.numel()))
            children: List[TransducerHypothesis] = []
            for i in range(top_flat.numel()):
                flat = int(top_flat[i])
                j = flat // vocab
                unit = flat % vocab
                children.append(fuse_child(_child(beam[j], unit, self.blank, frames_fed + t, float(top_scores[i]),
                                                  states_after[j]), beam[j], unit, self.blank, fusion))
            beam = _merge(children)
        return beam, blank_probs


# ------------------------------------------------------------------ one search's state (eager)


class _Search:
    """``searcher``: a :class:`TransducerSearcher`, or for the beam searches its scripted copy
    too (an exported archive's, which takes no ``fusion``; a scripted ``greedy_feed`` extends a
    copy of the hypothesis, not the one held here); ``device``: where the encoder frames are."""

    def __init__(self, searcher: nn.Module, device: torch.device, fusion: Optional[Fusion] = None):
        self.searcher = searcher
        self.device = device
        self.frames_fed = 0
        self.fusion = fusion  # (asrkit.decode.fusion; the beam searches)


class TransducerGreedySearch(_Search):
    """WeNet's greedy search (module docstring).  Differs from WeNet's code only when a frame
    reaches ``max_symbols_per_frame`` symbols: WeNet then reuses a predictor output one
    symbol behind; here the predictor output always follows the last symbol."""

    def __init__(self, searcher: nn.Module, device: torch.device,
                 max_symbols_per_frame: int = MAX_SYMBOLS_PER_FRAME):
        super().__init__(searcher, device)
        if max_symbols_per_frame < 1:
            raise ValueError(f"max_symbols_per_frame must be >= 1, got {max_symbols_per_frame}")
        self.max_symbols = max_symbols_per_frame
        self.hyp = self.searcher.initial(device)

    def feed(self, encoder_out: torch.Tensor) -> List[float]:
        """Search ``encoder_out [T, E]``, the next ``T`` encoder frames; returns each frame's
        blank probability after the last symbol it emitted (what endpointing reads)."""
        blank_probs = self.searcher.greedy_feed(self.hyp, encoder_out, self.frames_fed, self.max_symbols)
        self.frames_fed += encoder_out.size(0)
        return blank_probs

    def best(self) -> TransducerHypothesis:
        return self.hyp


class TransducerPrefixBeamSearch(_Search):
    """WeNet's transducer prefix beam search (module docstring); ``ctc_log_probs [T, V]`` of
    the same frames go to :meth:`feed` when ``ctc_weight > 0``.  Scores are WeNet's: the
    running sum of ``log(tw · P_joint + cw · P_ctc)`` of the chosen units, merged by log-add.
    The order of candidates and the stable sort follow WeNet's, so ties break alike."""

    def __init__(self, searcher: nn.Module, device: torch.device, beam_size: int,
                 ctc_weight: float = DEFAULT_SEARCH_CTC_WEIGHT,
                 transducer_weight: float = DEFAULT_SEARCH_TRANSDUCER_WEIGHT, fusion: Optional[Fusion] = None):
        super().__init__(searcher, device, fusion)
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if ctc_weight < 0 or transducer_weight < 0 or ctc_weight + transducer_weight <= 0:
            raise ValueError(f"search weights must be >= 0 with a positive sum, got ctc {ctc_weight}, "
                             f"transducer {transducer_weight}")
        self.beam_size = beam_size
        self.ctc_weight = ctc_weight
        self.transducer_weight = transducer_weight
        self.beam: List[TransducerHypothesis] = [self.searcher.initial(device)]

    def feed(self, encoder_out: torch.Tensor, ctc_log_probs: Optional[torch.Tensor] = None) -> List[float]:
        """Search ``encoder_out [T, E]`` (with ``ctc_log_probs [T, V]`` when ``ctc_weight > 0``);
        returns each frame's joint blank probability for the best hypothesis before it."""
        if self.ctc_weight > 0 and (ctc_log_probs is None or ctc_log_probs.size(0) != encoder_out.size(0)):
            raise ValueError("ctc_weight > 0 needs the CTC log-probabilities of the same frames")
        if self.fusion is None:
            self.beam, blank_probs = self.searcher.prefix_beam_feed(self.beam, encoder_out, ctc_log_probs,
                                                                    self.frames_fed, self.beam_size, self.ctc_weight,
                                                                    self.transducer_weight)
        else:
            self.beam, blank_probs = self.searcher.prefix_beam_feed(self.beam, encoder_out, ctc_log_probs,
                                                                    self.frames_fed, self.beam_size, self.ctc_weight,
                                                                    self.transducer_weight, self.fusion)
        self.frames_fed += encoder_out.size(0)
        return blank_probs

    def nbest(self) -> List[TransducerHypothesis]:
        """The beam, best first (with fusion: ended, :func:`finalized`, and ranked again)."""
        if self.fusion is None:
            return list(self.beam)
        return sorted(finalized(self.beam, self.fusion), key=lambda h: h.score, reverse=True)

    def best(self) -> TransducerHypothesis:
        return self.nbest()[0]


class ModifiedBeamSearch(_Search):
    """icefall's modified beam search (module docstring); scores are sums of joint
    log-probabilities, merged by log-add."""

    def __init__(self, searcher: nn.Module, device: torch.device, beam_size: int, fusion: Optional[Fusion] = None):
        super().__init__(searcher, device, fusion)
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        self.beam_size = beam_size
        self.beam: List[TransducerHypothesis] = [self.searcher.initial(device)]

    def feed(self, encoder_out: torch.Tensor) -> List[float]:
        """Search ``encoder_out [T, E]``, the next ``T`` encoder frames; returns each frame's
        joint blank probability for the highest-scoring hypothesis before it."""
        if self.fusion is None:
            self.beam, blank_probs = self.searcher.modified_beam_feed(self.beam, encoder_out, self.frames_fed,
                                                                      self.beam_size)
        else:
            self.beam, blank_probs = self.searcher.modified_beam_feed(self.beam, encoder_out, self.frames_fed,
                                                                      self.beam_size, self.fusion)
        self.frames_fed += encoder_out.size(0)
        return blank_probs

    def nbest(self) -> List[TransducerHypothesis]:
        """The beam (with fusion: ended, :func:`finalized`), best first by :func:`score_per_token`."""
        return sorted(finalized(self.beam, self.fusion), key=score_per_token, reverse=True)

    def best(self) -> TransducerHypothesis:
        return best_by_score_per_token(finalized(self.beam, self.fusion))
