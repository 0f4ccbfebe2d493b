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
"""
from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence

import torch
from torch import nn


def log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))`` without overflow (−inf stays −inf)."""
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    high = max(a, b)
    return high + math.log1p(math.exp(-abs(a - b)))


@dataclasses.dataclass
class TransducerHypothesis:
    """``tokens`` (without the leading ``<blank>``), their emission ``frames`` (indices into
    the encoder frames fed so far), the ``score`` the search ranks by, and the predictor
    ``state`` before the last token (``last`` is the token the next predictor step reads:
    ``<blank>`` before any)."""

    tokens: List[int]
    frames: List[int]
    score: float
    last: int
    state: List[torch.Tensor]


class _Search:
    """What every search shares: the predictor and joint, the blank id, the frame count."""

    def __init__(self, predictor: nn.Module, joint: nn.Module, blank: int, device: torch.device):
        self.predictor = predictor
        self.joint = joint
        self.blank = int(blank)
        self.device = device
        self.frames_fed = 0

    def _initial(self) -> TransducerHypothesis:
        return TransducerHypothesis([], [], 0.0, self.blank, self.predictor.init_state(1, device=self.device))

    def _step(self, hyps: Sequence[TransducerHypothesis], frame: torch.Tensor
              ) -> tuple[torch.Tensor, List[List[torch.Tensor]]]:
        """Joint log-probabilities ``[N, V]`` (fp32) of encoder ``frame [E]`` with each of
        ``hyps``' predictor outputs, and each hypothesis' state after its last token."""
        n = len(hyps)
        tokens = torch.tensor([[h.last] for h in hyps], dtype=torch.long, device=self.device)
        padding = torch.zeros(n, 1, device=self.device)
        state = self.predictor.cache_to_batch([h.state for h in hyps])
        pred_out, new_state = self.predictor.forward_step(tokens, padding, state)
        logits = self.joint(frame.view(1, 1, -1).expand(n, 1, -1), pred_out)  # [N, 1, 1, V]
        return logits.reshape(n, -1).float().log_softmax(dim=-1), self.predictor.batch_to_cache(new_state)


class TransducerGreedySearch(_Search):
    """WeNet's greedy search (module docstring).  Differs from WeNet's code only when a frame
    reaches ``max_symbols_per_frame`` symbols: WeNet then reuses a predictor output one
    symbol behind; here the predictor output always follows the last symbol."""

    def __init__(self, predictor: nn.Module, joint: nn.Module, blank: int, device: torch.device,
                 max_symbols_per_frame: int = 64):
        super().__init__(predictor, joint, blank, device)
        if max_symbols_per_frame < 1:
            raise ValueError(f"max_symbols_per_frame must be >= 1, got {max_symbols_per_frame}")
        self.max_symbols = max_symbols_per_frame
        self.hyp = self._initial()
        self._cached: Optional[tuple[torch.Tensor, List[torch.Tensor]]] = None  # pred out, state after last

    def feed(self, encoder_out: torch.Tensor) -> list[float]:
        """Search ``encoder_out [T, E]``, the next ``T`` encoder frames; returns each frame's
        blank probability after the last symbol it emitted (what endpointing reads)."""
        blank_probs: list[float] = []
        for t in range(encoder_out.size(0)):
            frame = encoder_out[t].view(1, 1, -1)
            blank_prob = 0.0
            for _ in range(self.max_symbols):
                if self._cached is None:
                    tokens = torch.tensor([[self.hyp.last]], dtype=torch.long, device=self.device)
                    self._cached = self.predictor.forward_step(tokens, torch.zeros(1, 1, device=self.device),
                                                               self.hyp.state)
                pred_out, state_after = self._cached
                logp = self.joint(frame, pred_out).reshape(-1).float().log_softmax(dim=-1)
                best = int(logp.argmax())
                blank_prob = float(logp[self.blank].exp())
                if best == self.blank:
                    break
                self.hyp.tokens.append(best)
                self.hyp.frames.append(self.frames_fed + t)
                self.hyp.last, self.hyp.state, self._cached = best, state_after, None
            blank_probs.append(blank_prob)
        self.frames_fed += encoder_out.size(0)
        return blank_probs

    def best(self) -> TransducerHypothesis:
        return self.hyp


class TransducerPrefixBeamSearch(_Search):
    """WeNet's transducer prefix beam search (module docstring); ``ctc_log_probs [T, V]`` of
    the same frames go to :meth:`feed` when ``ctc_weight > 0``.  Scores are WeNet's: the
    running sum of ``log(tw · P_joint + cw · P_ctc)`` of the chosen units, merged by log-add.
    The order of candidates and the stable sort follow WeNet's, so ties break alike."""

    def __init__(self, predictor: nn.Module, joint: nn.Module, blank: int, device: torch.device,
                 beam_size: int, ctc_weight: float = 0.3, transducer_weight: float = 0.7):
        super().__init__(predictor, joint, blank, device)
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if ctc_weight < 0 or transducer_weight < 0 or ctc_weight + transducer_weight <= 0:
            raise ValueError(f"search weights must be >= 0 with a positive sum, got ctc {ctc_weight}, "
                             f"transducer {transducer_weight}")
        self.beam_size = beam_size
        self.ctc_weight = ctc_weight
        self.transducer_weight = transducer_weight
        self.beam: List[TransducerHypothesis] = [self._initial()]

    def feed(self, encoder_out: torch.Tensor, ctc_log_probs: Optional[torch.Tensor] = None) -> list[float]:
        """Search ``encoder_out [T, E]`` (with ``ctc_log_probs [T, V]`` when ``ctc_weight > 0``);
        returns each frame's joint blank probability for the best hypothesis before it."""
        if self.ctc_weight > 0 and (ctc_log_probs is None or ctc_log_probs.size(0) != encoder_out.size(0)):
            raise ValueError("ctc_weight > 0 needs the CTC log-probabilities of the same frames")
        blank_probs: list[float] = []
        for t in range(encoder_out.size(0)):
            logp, states_after = self._step(self.beam, encoder_out[t])
            blank_probs.append(float(logp[0, self.blank].exp()))  # (the beam is sorted: 0 is the best)
            probs = self.transducer_weight * logp.exp()
            if self.ctc_weight > 0 and ctc_log_probs is not None:
                probs = probs + self.ctc_weight * ctc_log_probs[t].float().exp().unsqueeze(0)
            top_logp, top_units = probs.log().topk(self.beam_size, dim=-1)
            scores = torch.tensor([h.score for h in self.beam], dtype=torch.float32).unsqueeze(1) + top_logp
            merged: dict[tuple, TransducerHypothesis] = {}
            for j, hyp in enumerate(self.beam):
                for k in range(self.beam_size):
                    unit, score = int(top_units[j, k]), float(scores[j, k])
                    if unit == self.blank:
                        child = TransducerHypothesis(list(hyp.tokens), list(hyp.frames), score, hyp.last, hyp.state)
                    else:
                        child = TransducerHypothesis(hyp.tokens + [unit], hyp.frames + [self.frames_fed + t],
                                                     score, unit, states_after[j])
                    key = tuple(child.tokens)
                    if key in merged:  # the first of equal prefixes keeps its state and frames
                        merged[key].score = log_add(merged[key].score, child.score)
                    else:
                        merged[key] = child
            self.beam = sorted(merged.values(), key=lambda h: h.score, reverse=True)[: self.beam_size]
        self.frames_fed += encoder_out.size(0)
        return blank_probs

    def nbest(self) -> List[TransducerHypothesis]:
        """The beam, best first."""
        return list(self.beam)

    def best(self) -> TransducerHypothesis:
        return self.beam[0]


class ModifiedBeamSearch(_Search):
    """icefall's modified beam search (module docstring); scores are sums of joint
    log-probabilities, merged by log-add."""

    def __init__(self, predictor: nn.Module, joint: nn.Module, blank: int, device: torch.device, beam_size: int):
        super().__init__(predictor, joint, blank, device)
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        self.beam_size = beam_size
        self.beam: List[TransducerHypothesis] = [self._initial()]

    def feed(self, encoder_out: torch.Tensor) -> list[float]:
        """Search ``encoder_out [T, E]``, the next ``T`` encoder frames; returns each frame's
        joint blank probability for the highest-scoring hypothesis before it."""
        blank_probs: list[float] = []
        for t in range(encoder_out.size(0)):
            logp, states_after = self._step(self.beam, encoder_out[t])
            leader = max(range(len(self.beam)), key=lambda j: self.beam[j].score)
            blank_probs.append(float(logp[leader, self.blank].exp()))
            totals = logp + torch.tensor([h.score for h in self.beam], dtype=torch.float32).unsqueeze(1)
            vocab = totals.size(1)
            top_scores, top_flat = totals.reshape(-1).topk(min(self.beam_size, totals.numel()))
            merged: dict[tuple, TransducerHypothesis] = {}
            for score, flat in zip(top_scores.tolist(), top_flat.tolist()):
                j, unit = divmod(flat, vocab)
                hyp = self.beam[j]
                if unit == self.blank:
                    child = TransducerHypothesis(list(hyp.tokens), list(hyp.frames), score, hyp.last, hyp.state)
                else:
                    child = TransducerHypothesis(hyp.tokens + [unit], hyp.frames + [self.frames_fed + t], score,
                                                 unit, states_after[j])
                key = tuple(child.tokens)
                if key in merged:
                    merged[key].score = log_add(merged[key].score, child.score)
                else:
                    merged[key] = child
            self.beam = list(merged.values())
        self.frames_fed += encoder_out.size(0)
        return blank_probs

    def nbest(self) -> List[TransducerHypothesis]:
        """The beam, best first by score / (tokens + 1): icefall's length normalisation, whose
        token sequence counts the leading ``<blank>`` (with a stateless predictor of context 1)."""
        return sorted(self.beam, key=lambda h: h.score / (len(h.tokens) + 1), reverse=True)

    def best(self) -> TransducerHypothesis:
        return self.nbest()[0]
