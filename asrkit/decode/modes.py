"""The decoding-mode registry: what each mode needs from the model and how it runs from
the outputs every mode of a batch shares (one encoder pass, one CTC log-softmax, one
prefix-beam n-best).  A new mode is one :func:`register_mode` call."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Tuple

import torch

from asrkit.decode import transducer_modes as td
from asrkit.decode.attention_search import pick_rescored, rank_rescored
from asrkit.decode.ctc_search import ctc_prefix_beam_search_fused
from asrkit.decode.searcher import Searcher

if TYPE_CHECKING:
    from asrkit.decode.options import DecodingOptions


class ModeError(ValueError):
    """A decoding mode that does not exist, or that this model cannot run."""


@dataclasses.dataclass(frozen=True)
class Requirement:
    """A part of the model a mode needs: ``description`` names it in messages
    ("a CTC head"), ``absent_because`` says why a model lacks it."""

    description: str
    absent_because: str
    present: Callable[[Searcher], bool]


CTC_HEAD = Requirement("a CTC head", "trained with ctc_weight 0", Searcher.has_ctc)
ATTENTION_DECODER = Requirement("an attention decoder", "trained with ctc_weight 1", Searcher.has_decoder)
# (getattr: an exported archive's scripted searcher, from a CTC/attention model, may predate the flag)
TRANSDUCER = Requirement("a transducer (predictor and joint)", "it is not model: transducer",
                         lambda searcher: bool(getattr(searcher, "transducer", False)))


@dataclasses.dataclass
class SharedOutputs:
    """What the modes of one batch share: the encoder output, and -- computed on first
    use, then reused -- the CTC log-posteriors (``blank_penalty`` applied: every CTC mode
    and the CTC scores of ``attention_rescoring`` see it, as in WeNet) and the
    prefix-beam n-best.  ``length_penalty`` ranks the ``attention`` mode's hypotheses
    (WeNet's; ``attention_rescoring`` does not use it)."""

    searcher: Searcher
    encoder_out: torch.Tensor
    encoder_lengths: torch.Tensor
    beam_size: int
    ctc_weight: float
    reverse_weight: float
    blank_skip_threshold: float
    length_penalty: float = 0.0
    blank_penalty: float = 0.0
    # the transducer modes (asrkit.decode.transducer_modes): the searcher over the model's
    # predictor and joint, the per-utterance RNN-T loss (the rescoring modes; an exported
    # archive has none), and WeNet's search and rescoring weights
    transducer: Optional[Any] = None
    rnnt_loss: Optional[Callable[..., torch.Tensor]] = None
    search_ctc_weight: float = 0.3
    search_transducer_weight: float = 0.7
    transducer_weight: float = 0.5
    attn_weight: float = 0.5
    # LM fusion and context biasing (asrkit.decode.fusion.Fusion; None: neither) of the modes
    # that take them (DecodingMode.fused)
    fusion: Optional[Any] = None
    _log_probs: Optional[torch.Tensor] = None
    _nbest: Optional[Tuple[List[List[List[int]]], List[List[float]]]] = None
    _fusion_scores: Optional[List[List[float]]] = None

    @classmethod
    def from_options(cls, searcher: Searcher, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor,
                     options: "DecodingOptions", model: Optional[Any] = None,
                     fusion: Optional[Any] = None) -> "SharedOutputs":
        """The shared outputs of one encoder pass, searched with ``options``; ``model``: what
        the transducer modes need (:func:`asrkit.decode.transducer_modes.transducer_parts`:
        the model, or an exported archive's scripted module); ``fusion``: the
        :func:`asrkit.decode.fusion.build_fusion` of ``options`` (``None`` when they ask for
        no LM and no biasing)."""
        transducer, rnnt_loss = td.transducer_parts(model) if TRANSDUCER.present(searcher) else (None, None)
        return cls(searcher, encoder_out, encoder_lengths, beam_size=options.beam_size,
                   ctc_weight=options.ctc_weight, reverse_weight=options.reverse_weight,
                   blank_skip_threshold=options.blank_skip_threshold, length_penalty=options.length_penalty,
                   blank_penalty=options.blank_penalty,
                   transducer=transducer, rnnt_loss=rnnt_loss,
                   search_ctc_weight=options.search_ctc_weight,
                   search_transducer_weight=options.search_transducer_weight,
                   transducer_weight=options.transducer_weight, attn_weight=options.attn_weight, fusion=fusion)

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


@dataclasses.dataclass(frozen=True)
class DecodingMode:
    """``run(shared) -> token ids per utterance``; ``needs``: what the model must have;
    ``nbest(shared) -> hypotheses per utterance``, best first, the first ``run``'s result (the
    mode's own n-best: its beam, ranked as ``run`` ranks it; ``None``: the mode has one
    hypothesis, see :func:`mode_nbest`)."""

    name: str
    needs: Tuple[Requirement, ...]
    run: Callable[[SharedOutputs], List[List[int]]]
    summary: str
    fused: bool = False  # takes LM fusion and context biasing (SharedOutputs.fusion)
    nbest: Optional[Callable[[SharedOutputs], List[List[List[int]]]]] = None


REGISTRY: dict[str, DecodingMode] = {}


def register_mode(mode: DecodingMode) -> DecodingMode:
    """Add ``mode`` to :data:`REGISTRY` (a name may be registered once)."""
    if mode.name in REGISTRY:
        raise ValueError(f"decoding mode {mode.name} is already registered")
    REGISTRY[mode.name] = mode
    return mode


def _best_of(nbest: List[List[List[int]]]) -> List[List[int]]:
    return [list(hyps[0]) if hyps else [] for hyps in nbest]


def _nbest_of(nbest: List[List[List[int]]]) -> List[List[List[int]]]:
    return [[list(h) for h in hyps] or [[]] for hyps in nbest]


def _rescored_nbest(shared: SharedOutputs) -> List[List[List[int]]]:
    """``attention_rescoring``'s n-best ranked by its rescoring total (:func:`_rescore`'s choice first)."""
    hyps, ctc_scores = shared.nbest()
    decoder_scores = shared.searcher.rescoring_scores(shared.encoder_out, shared.encoder_lengths, hyps,
                                                      shared.reverse_weight)
    return rank_rescored(hyps, ctc_scores, decoder_scores, shared.ctc_weight, shared.fusion_scores())


def _rescore(shared: SharedOutputs) -> List[List[int]]:
    hyps, ctc_scores = shared.nbest()
    if shared.fusion is None:
        best, _ = shared.searcher.attention_rescoring(shared.encoder_out, shared.encoder_lengths, hyps, ctc_scores,
                                                      shared.ctc_weight, shared.reverse_weight)
        return best
    decoder_scores = shared.searcher.rescoring_scores(shared.encoder_out, shared.encoder_lengths, hyps,
                                                      shared.reverse_weight)
    return pick_rescored(hyps, ctc_scores, decoder_scores, shared.ctc_weight, shared.fusion_scores())[0]


register_mode(DecodingMode(
    "ctc_greedy_search", (CTC_HEAD,),
    lambda shared: shared.searcher.ctc_greedy(shared.log_probs(), shared.encoder_lengths),
    "best CTC path: per-frame argmax, repeats merged, blanks dropped"))
register_mode(DecodingMode(
    "ctc_prefix_beam_search", (CTC_HEAD,), lambda shared: _best_of(shared.nbest()[0]),
    "best prefix of the CTC prefix beam search (the n-best shared with attention_rescoring)", fused=True,
    nbest=lambda shared: _nbest_of(shared.nbest()[0])))
register_mode(DecodingMode(
    "attention", (ATTENTION_DECODER,),
    lambda shared: shared.searcher.attention_beam(shared.encoder_out, shared.encoder_lengths,
                                                  shared.beam_size, shared.length_penalty)[0],
    "attention-decoder beam search (ranked with length_penalty)"))
register_mode(DecodingMode(
    "attention_rescoring", (CTC_HEAD, ATTENTION_DECODER), _rescore,
    "the CTC prefix-beam n-best rescored by the decoder(s) plus ctc_weight x CTC score", fused=True,
    nbest=_rescored_nbest))


register_mode(DecodingMode(
    "rnnt_greedy_search", (TRANSDUCER,), lambda shared: [h.tokens for h in td.greedy_hypotheses(shared)],
    "transducer greedy search: the joint's argmax per step, up to 64 symbols per frame (WeNet's)"))
register_mode(DecodingMode(
    "rnnt_beam_search", (TRANSDUCER,), lambda shared: [beam[0].tokens for beam in td.prefix_beam_nbest(shared)],
    "WeNet's transducer prefix beam search, one symbol per frame, search_transducer_weight x joint + "
    "search_ctc_weight x CTC", fused=True,
    nbest=lambda shared: [[list(h.tokens) for h in beam] or [[]] for beam in td.prefix_beam_nbest(shared)]))
register_mode(DecodingMode(
    "modified_beam_search", (TRANSDUCER,), lambda shared: [h.tokens for h in td.modified_beam_hypotheses(shared)],
    "icefall's modified beam search: one symbol per frame, the beam's best (hypothesis, unit) pairs", fused=True))
register_mode(DecodingMode(
    "rnnt_beam_attn_rescoring", (TRANSDUCER, ATTENTION_DECODER),
    lambda shared: [tokens for tokens, _ in td.rnnt_beam_rescored(shared)],
    "the rnnt_beam_search n-best rescored: attn_weight x attention + ctc_weight x search score + "
    "transducer_weight x RNN-T log-likelihood", fused=True))
register_mode(DecodingMode(
    "ctc_beam_td_attn_rescoring", (TRANSDUCER, CTC_HEAD, ATTENTION_DECODER),
    lambda shared: [tokens for tokens, _ in td.ctc_beam_rescored(shared)],
    "the CTC prefix-beam n-best rescored as rnnt_beam_attn_rescoring, with the CTC score as search score", fused=True))


def mode_nbest(name: str, shared: SharedOutputs) -> List[List[List[int]]]:
    """The registered mode ``name``'s hypotheses per utterance, best first, the first its
    result: :attr:`DecodingMode.nbest` (``attention_rescoring``: the prefix-beam n-best ranked by
    the rescoring; ``ctc_prefix_beam_search``, ``rnnt_beam_search``: the beam), else the one
    hypothesis of ``run``."""
    mode = REGISTRY[name]
    if mode.nbest is not None:
        return mode.nbest(shared)
    return [[list(h)] for h in mode.run(shared)]


def fused_modes(names: Iterable[str]) -> list[str]:
    """Those of the registered modes ``names`` that take LM fusion and context biasing."""
    return [name for name in names if name in REGISTRY and REGISTRY[name].fused]


def mode_names() -> tuple[str, ...]:
    """Registered mode names, in registration order."""
    return tuple(REGISTRY)


# the refusal of a mode name that is not registered: .format(name, known names); the exported
# module fills in its known names at export time (asrkit.export.torchscript)
UNKNOWN_MODE = "unknown decoding mode '{}'; choose from {}"


def unknown_mode_message(name: str) -> str:
    """The refusal of ``name``, a mode that is not registered (:data:`UNKNOWN_MODE`)."""
    return UNKNOWN_MODE.format(name, list(REGISTRY))


def check_mode_names(modes: Iterable[str]) -> list[str]:
    """``modes`` as a list, after checking that there is one at least and that each is
    registered; raises :class:`ModeError` naming the first problem."""
    modes = list(modes)
    if not modes:
        raise ModeError(f"no decoding mode given; choose from {list(REGISTRY)}")
    for name in modes:
        if name not in REGISTRY:
            raise ModeError(unknown_mode_message(name))
    return modes


def refusal(name: str, searcher: Searcher) -> Optional[str]:
    """Why ``searcher``'s model cannot run the registered mode ``name`` (the first part it
    needs and lacks, in one line), or ``None`` when it can."""
    for need in REGISTRY[name].needs:
        if not need.present(searcher):
            return f"mode {name} needs {need.description}; this model has none ({need.absent_because})"
    return None


def runnable_modes(model) -> list[str]:
    """The registered modes ``model`` (an :class:`asrkit.models.AsrModel`, a transducer or a
    :class:`Searcher`) has what it needs for, in registration order."""
    searcher = model if isinstance(model, Searcher) else Searcher.of_model(model)
    return [name for name in REGISTRY if refusal(name, searcher) is None]


def check_modes(model, modes: Iterable[str]) -> list[str]:
    """``modes`` as a list, after checking that all are registered (:func:`check_mode_names`)
    and that ``model`` (an :class:`asrkit.models.AsrModel` or a :class:`Searcher`) has
    what it needs (:func:`refusal`).  Raises :class:`ModeError` with a one-line message
    naming the first problem."""
    modes = check_mode_names(modes)
    searcher = model if isinstance(model, Searcher) else Searcher.of_model(model)
    for name in modes:
        reason = refusal(name, searcher)
        if reason is not None:
            raise ModeError(reason)
    return modes


MODES = mode_names()  # the modes registered here (a mode registered later is not in it)
