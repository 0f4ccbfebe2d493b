"""The decoding-mode registry, the one place that says what each mode is: one
:class:`DecodingMode` per mode holds what it needs from the model, how it runs on the
outputs every mode of a batch shares (:class:`asrkit.decode.shared.SharedOutputs`: one
encoder pass, one CTC log-softmax, one prefix-beam n-best), which results it gives (token
ids, its own n-best, token times), whether it takes LM fusion, reads ``reverse_weight`` or
runs in an exported archive, and how a stream runs it.  What the other parts offer is read
from here: the exported module's modes (:func:`scripted_modes`), the stream's search
(:mod:`asrkit.stream.searches`), transcription's token times, a server's partial results,
the command lines' choices.  A new mode is one :func:`register_mode` call."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, List, Optional, Tuple

from asrkit.decode import transducer_modes as td
from asrkit.decode.attention_search import pick_rescored, rank_rescored
from asrkit.decode.searcher import Searcher, has_transducer
from asrkit.decode.shared import SharedOutputs
from asrkit.decode.transducer_search import MAX_SYMBOLS_PER_FRAME


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
TRANSDUCER = Requirement("a transducer (predictor and joint)", "it is not model: transducer", has_transducer)


@dataclasses.dataclass(frozen=True)
class Streaming:
    """How a stream (:mod:`asrkit.stream`) runs a mode over a segment's encoder frames, chunk
    after chunk.  ``kind`` names the stream's search (:data:`asrkit.stream.searches.STREAM_SEARCHES`):

    * ``"ctc"`` -- the incremental CTC prefix beam search, its n-best rescored by the
      attention decoder over the whole segment at its end (without a decoder: its best
      prefix); the same for every mode of this kind.
    * ``"transducer"`` -- ``search(searcher, device, options, fusion)``: one of the search
      classes of :mod:`asrkit.decode.transducer_search`, made as the mode makes it
      (:mod:`asrkit.decode.transducer_modes`), its predictor state carried across chunks;
      ``final(shared, search)``: the segment's result from the outputs of all its frames
      (``None``: the search's best hypothesis)."""

    kind: str
    search: Optional[Callable[..., Any]] = None
    final: Optional[Callable[[SharedOutputs, Any], List[int]]] = None


CTC_STREAM = Streaming("ctc")


@dataclasses.dataclass(frozen=True)
class DecodingMode:
    """Everything about one decoding mode.

    * ``name``; ``needs``: what the model must have; ``summary``: one line.
    * Its results: ``run(shared) -> token ids per utterance``; ``nbest(shared) -> hypotheses
      per utterance``, best first, the first ``run``'s result (the mode's own n-best: its
      beam, ranked as ``run`` ranks it; ``None``: the mode has one hypothesis, see
      :func:`mode_nbest`); ``timed(shared) -> one hypothesis per utterance`` whose ``tokens``
      are ``run``'s and whose ``frames`` are the encoder frame of each token's emission
      (``None``: the search gives no token times).
    * ``fused``: takes LM fusion and context biasing (:attr:`SharedOutputs.fusion`).
    * ``reads_reverse_weight``: ranks with the right-to-left decoder's scores, weighed by
      ``reverse_weight`` (:func:`check_reverse_weight`).
    * ``scripted``: the exported TorchScript module runs it (a branch of
      ``asrkit.export.torchscript.ScriptableAsr.decode``; :func:`scripted_modes`).
    * ``stream``: how a stream runs it (:class:`Streaming`; ``None``: a stream cannot).
    * ``partial``: cheap enough to re-decode a growing segment for each partial result
      (what a server's segment session does, :class:`asrkit.serve.model.ServedModel`)."""

    name: str
    needs: Tuple[Requirement, ...]
    run: Callable[[SharedOutputs], List[List[int]]]
    summary: str
    fused: bool = False
    nbest: Optional[Callable[[SharedOutputs], List[List[List[int]]]]] = None
    timed: Optional[Callable[[SharedOutputs], list]] = None
    reads_reverse_weight: bool = False
    scripted: bool = False
    stream: Optional[Streaming] = None
    partial: bool = False


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


def _ctc_beam_td_rescored(shared: SharedOutputs) -> List[List[int]]:
    return [tokens for tokens, _ in td.ctc_beam_rescored(shared)]


register_mode(DecodingMode(
    "ctc_greedy_search", (CTC_HEAD,),
    lambda shared: shared.searcher.ctc_greedy(shared.log_probs(), shared.encoder_lengths),
    "best CTC path: per-frame argmax, repeats merged, blanks dropped", scripted=True, stream=CTC_STREAM,
    partial=True))
register_mode(DecodingMode(
    "ctc_prefix_beam_search", (CTC_HEAD,), lambda shared: _best_of(shared.nbest()[0]),
    "best prefix of the CTC prefix beam search (the n-best shared with attention_rescoring)", fused=True,
    nbest=lambda shared: _nbest_of(shared.nbest()[0]), scripted=True, stream=CTC_STREAM))
register_mode(DecodingMode(
    "attention", (ATTENTION_DECODER,),
    lambda shared: shared.searcher.attention_beam(shared.encoder_out, shared.encoder_lengths,
                                                  shared.beam_size, shared.length_penalty)[0],
    "attention-decoder beam search (ranked with length_penalty)", scripted=True, stream=CTC_STREAM))
register_mode(DecodingMode(
    "attention_rescoring", (CTC_HEAD, ATTENTION_DECODER), _rescore,
    "the CTC prefix-beam n-best rescored by the decoder(s) plus ctc_weight x CTC score", fused=True,
    nbest=_rescored_nbest, reads_reverse_weight=True, scripted=True, stream=CTC_STREAM))
register_mode(DecodingMode(
    "rnnt_greedy_search", (TRANSDUCER,), lambda shared: [h.tokens for h in td.greedy_hypotheses(shared)],
    f"transducer greedy search: the joint's argmax per step, up to {MAX_SYMBOLS_PER_FRAME} symbols per frame "
    f"(WeNet's)", timed=td.greedy_hypotheses, scripted=True, stream=Streaming("transducer", td.greedy_search)))
register_mode(DecodingMode(
    "rnnt_beam_search", (TRANSDUCER,), lambda shared: [h.tokens for h in td.best_of_prefix_beam(shared)],
    "WeNet's transducer prefix beam search, one symbol per frame, search_transducer_weight x joint + "
    "search_ctc_weight x CTC", fused=True,
    nbest=lambda shared: [[list(h.tokens) for h in beam] or [[]] for beam in td.prefix_beam_nbest(shared)],
    timed=td.best_of_prefix_beam, scripted=True, stream=Streaming("transducer", td.prefix_beam_search)))
register_mode(DecodingMode(
    "modified_beam_search", (TRANSDUCER,), lambda shared: [h.tokens for h in td.modified_beam_hypotheses(shared)],
    "icefall's modified beam search: one symbol per frame, the beam's best (hypothesis, unit) pairs", fused=True,
    timed=td.modified_beam_hypotheses, scripted=True, stream=Streaming("transducer", td.modified_beam_search)))
# (the two transducer rescorings need torchaudio's RNN-T loss, which an exported archive does not carry)
register_mode(DecodingMode(
    "rnnt_beam_attn_rescoring", (TRANSDUCER, ATTENTION_DECODER),
    lambda shared: [tokens for tokens, _ in td.rnnt_beam_rescored(shared)],
    "the rnnt_beam_search n-best rescored: attn_weight x attention + ctc_weight x search score + "
    "transducer_weight x RNN-T log-likelihood", fused=True, timed=td.rescored_hypotheses, reads_reverse_weight=True,
    stream=Streaming("transducer", td.prefix_beam_search, td.rescored_stream)))
register_mode(DecodingMode(
    "ctc_beam_td_attn_rescoring", (TRANSDUCER, CTC_HEAD, ATTENTION_DECODER), _ctc_beam_td_rescored,
    "the CTC prefix-beam n-best rescored as rnnt_beam_attn_rescoring, with the CTC score as search score", fused=True,
    reads_reverse_weight=True,
    stream=Streaming("transducer", td.prefix_beam_search, lambda shared, search: _ctc_beam_td_rescored(shared)[0])))


def mode_nbest(name: str, shared: SharedOutputs) -> List[List[List[int]]]:
    """The registered mode ``name``'s hypotheses per utterance, best first, the first its
    result: :attr:`DecodingMode.nbest` (``attention_rescoring``: the prefix-beam n-best ranked by
    the rescoring; ``ctc_prefix_beam_search``, ``rnnt_beam_search``: the beam), else the one
    hypothesis of ``run``."""
    mode = REGISTRY[name]
    if mode.nbest is not None:
        return mode.nbest(shared)
    return [[list(h)] for h in mode.run(shared)]


def mode_names() -> tuple[str, ...]:
    """Registered mode names, in registration order."""
    return tuple(REGISTRY)


def __getattr__(name: str):
    if name == "MODES":  # (the registered names when asked -- a mode registered later is in it -- not a copy)
        return mode_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fused_modes(names: Iterable[str]) -> list[str]:
    """Those of the registered modes ``names`` that take LM fusion and context biasing."""
    return [name for name in names if name in REGISTRY and REGISTRY[name].fused]


def scripted_modes() -> tuple[str, ...]:
    """The registered modes an exported TorchScript module runs (:attr:`DecodingMode.scripted`),
    in registration order."""
    return tuple(name for name, mode in REGISTRY.items() if mode.scripted)


def partial_modes() -> tuple[str, ...]:
    """The registered modes cheap enough for partial results (:attr:`DecodingMode.partial`)."""
    return tuple(name for name, mode in REGISTRY.items() if mode.partial)


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


def check_reverse_weight(searcher: Searcher, modes: Iterable[str], reverse_weight: float) -> None:
    """Raise ``ValueError`` when ``reverse_weight > 0`` and one of the registered ``modes``
    reads it (:attr:`DecodingMode.reads_reverse_weight`) but ``searcher``'s decoder has no
    right-to-left half (``decoder: bitransformer``)."""
    if reverse_weight > 0.0 and not searcher.bidirectional and any(REGISTRY[m].reads_reverse_weight for m in modes):
        raise ValueError("reverse_weight > 0 needs a model with decoder bitransformer")
