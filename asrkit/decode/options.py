"""What a decoding run is told to do: one frozen :class:`DecodingOptions`, checked once,
when it is built, whose field defaults are the decoding defaults (:data:`DEFAULTS`, which the
command lines, the server, transcription and the exported archive read; three of them are
the searches' own, :mod:`asrkit.decode.search_defaults`).  The command-line
tools build it from their arguments and hand it to recognition
(:mod:`asrkit.decode.recognizer`), transcription (:mod:`asrkit.transcribe`) and streaming
(:mod:`asrkit.stream`); nothing below them checks it again.  Whether a model can run the
modes is the registry's question (:func:`asrkit.decode.modes.check_modes`), asked where the
model is known.  :func:`build_fusion` makes the LM and context graph the options ask for.

Importing this module imports neither torch nor the searches (the command lines build their
parsers from :data:`DEFAULTS` before either loads): the mode registry, which comes with the
searches, is read when options are built, the fusion code when :func:`build_fusion` runs."""
from __future__ import annotations

import contextlib
import dataclasses
import math
import types
from typing import Optional, Tuple

from asrkit.decode.search_defaults import (DEFAULT_BLANK_SKIP_THRESHOLD, DEFAULT_SEARCH_CTC_WEIGHT,
                                           DEFAULT_SEARCH_TRANSDUCER_WEIGHT)

# the dtype values and the torch dtype each autocasts to (None: no autocast)
AUTOCAST_DTYPES = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}


class DecodingOptionError(ValueError):
    """A decoding option outside its range, or options that do not go together."""


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How to decode (WeNet's option names and defaults).

    * ``modes``: registered decoding modes (:data:`asrkit.decode.modes.REGISTRY`), results
      in this order; a list is stored as a tuple.  Transcription runs exactly one.
    * ``beam_size`` (>= 1): beam of ``ctc_prefix_beam_search``, ``attention`` and the n-best of
      ``attention_rescoring`` (and of the streaming prefix search).
    * ``ctc_weight``, ``reverse_weight`` (each in [0, 1]): ``attention_rescoring`` ranks
      hypotheses by ``(1 − reverse_weight)·l2r + reverse_weight·r2l + ctc_weight·CTC``.
    * ``blank_skip_threshold``: prefix beam search: frames with P(blank) above it add no
      new prefixes (1.0: none skipped).
    * ``length_penalty`` (>= 0; 0: none): ``attention`` ranks by ``score / tokens **
      length_penalty``.  ``blank_penalty`` (>= 0; 0: none): subtracted from the blank's
      logit before every CTC search.
    * ``decoding_chunk_size`` (-1 or 0: full context; ``N > 0``: every encoder frame sees
      its chunk of ``N`` frames and ``num_decoding_left_chunks`` chunks before it, -1: all);
      ``simulate_streaming`` (needs ``N > 0``): the encoder runs chunk by chunk with its
      caches (see :func:`asrkit.decode.batch.encoder_output`).
    * transducer modes (WeNet's names and its transducer recipe's values):
      ``search_ctc_weight`` and ``search_transducer_weight`` (>= 0, positive sum) weigh CTC and
      joint probabilities in ``rnnt_beam_search`` (and its n-best for
      ``rnnt_beam_attn_rescoring``); the two rescoring modes rank by ``attn_weight``·attention
      + ``ctc_weight``·search score + ``transducer_weight``·RNN-T log-likelihood (each >= 0).
    * LM fusion and contextual biasing (:mod:`asrkit.decode.fusion`; the modes that take them:
      :func:`asrkit.decode.modes.fused_modes`): ``lm_path`` (an ARPA file; ``None``: no LM),
      ``lm_weight`` (>= 0) times the LM's natural-log probability of each completed word
      (less ``lm_oov_penalty`` (>= 0) for a word the LM does not know), plus ``word_bonus``
      per word; ``context_phrases`` (WeNet's ``--context_list_path``, read: the phrases
      themselves; a list is stored as a tuple) with ``context_graph_score`` (>= 0) per
      matched unit, ``context_bias_mode`` ``decoding-graph`` (WeNet's; the default when
      phrases are given); ``context_strict`` False: sherpa-onnx's non-strict matching
      (:func:`asrkit.decode.context_graph.build_context_graph`).  Checked here without the
      model; the files are read by :func:`build_fusion`, which needs the model's units.
    * ``batch_size`` (>= 1): utterances per encoder pass when a data list is recognised.
    * ``dtype`` (``fp32``, ``bf16``, ``fp16``): the precision of the encoder and decoder
      passes -- ``torch.autocast`` with that dtype (:meth:`autocast`); the CTC
      log-probabilities and every search's scores stay fp32 (autocast computes
      ``log_softmax`` in fp32).

    Streaming (:class:`asrkit.stream.recognizer.StreamingRecognizer`) reads the chunk
    options (``decoding_chunk_size > 0``), ``beam_size``, ``ctc_weight`` and
    ``reverse_weight``, the transducer weights and the fusion options; transcription every
    field but ``batch_size`` (and, for an exported archive, ``simulate_streaming`` and the
    fusion options, which it refuses).

    Building one with a value out of range raises :class:`DecodingOptionError`, with an
    unknown or no mode :class:`asrkit.decode.modes.ModeError` (one line naming the first
    problem)."""

    modes: Tuple[str, ...] = ("attention_rescoring",)
    beam_size: int = 10
    ctc_weight: float = 0.3
    reverse_weight: float = 0.0
    blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD
    length_penalty: float = 0.0
    blank_penalty: float = 0.0
    decoding_chunk_size: int = -1
    num_decoding_left_chunks: int = -1
    simulate_streaming: bool = False
    batch_size: int = 16
    dtype: str = "fp32"
    search_ctc_weight: float = DEFAULT_SEARCH_CTC_WEIGHT
    search_transducer_weight: float = DEFAULT_SEARCH_TRANSDUCER_WEIGHT
    transducer_weight: float = 0.5
    attn_weight: float = 0.5
    lm_path: Optional[str] = None
    lm_weight: float = 0.5
    word_bonus: float = 1.0
    lm_oov_penalty: float = 10.0
    context_bias_mode: str = ""
    context_phrases: Tuple[str, ...] = ()
    context_graph_score: float = 3.0
    context_strict: bool = True

    def __post_init__(self):
        if self.beam_size < 1:
            raise DecodingOptionError(f"beam_size must be >= 1, got {self.beam_size}")
        for name in ("ctc_weight", "reverse_weight"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:  # (also refuses nan)
                raise DecodingOptionError(f"{name} must be in [0, 1], got {value}")
        for name in ("search_ctc_weight", "search_transducer_weight", "transducer_weight", "attn_weight"):
            value = getattr(self, name)
            if not value >= 0.0:  # (also refuses nan)
                raise DecodingOptionError(f"{name} must be >= 0, got {value}")
        if self.search_ctc_weight + self.search_transducer_weight <= 0.0:
            raise DecodingOptionError("search_ctc_weight + search_transducer_weight must be > 0, got 0")
        if self.decoding_chunk_size < -1:
            raise DecodingOptionError(f"decoding_chunk_size must be -1 or 0 (full context) or > 0 (chunk size in "
                                      f"encoder frames), got {self.decoding_chunk_size}")
        if self.num_decoding_left_chunks < -1:
            raise DecodingOptionError(f"num_decoding_left_chunks must be -1 (all left chunks) or >= 0, "
                                      f"got {self.num_decoding_left_chunks}")
        if self.simulate_streaming and self.decoding_chunk_size <= 0:
            raise DecodingOptionError(f"simulate_streaming needs decoding_chunk_size > 0, "
                                      f"got {self.decoding_chunk_size}")
        if self.length_penalty < 0.0:
            raise DecodingOptionError(f"length_penalty must be >= 0, got {self.length_penalty}")
        if self.blank_penalty < 0.0:
            raise DecodingOptionError(f"blank_penalty must be >= 0, got {self.blank_penalty}")
        if self.batch_size < 1:
            raise DecodingOptionError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.dtype not in AUTOCAST_DTYPES:
            raise DecodingOptionError(f"dtype must be one of {', '.join(AUTOCAST_DTYPES)}, got {self.dtype!r}")
        if isinstance(self.modes, str):
            raise TypeError(f"modes is a sequence of mode names, got the string {self.modes!r}")
        from asrkit.decode.modes import check_mode_names  # (deferred: the module docstring says why)
        object.__setattr__(self, "modes", tuple(check_mode_names(self.modes)))
        self._check_fusion()

    def _check_fusion(self) -> None:
        from asrkit.decode.modes import REGISTRY, fused_modes  # (deferred: the module docstring says why)
        if not (self.lm_weight >= 0.0 and math.isfinite(self.lm_weight)):
            raise DecodingOptionError(f"lm_weight must be >= 0, got {self.lm_weight}")
        if not (self.lm_oov_penalty >= 0.0 and math.isfinite(self.lm_oov_penalty)):
            raise DecodingOptionError(f"lm_oov_penalty must be >= 0, got {self.lm_oov_penalty}")
        if not math.isfinite(self.word_bonus):
            raise DecodingOptionError(f"word_bonus must be a finite number, got {self.word_bonus}")
        if not (self.context_graph_score >= 0.0 and math.isfinite(self.context_graph_score)):
            raise DecodingOptionError(f"context_graph_score must be >= 0, got {self.context_graph_score}")
        if isinstance(self.context_phrases, str):
            raise TypeError(f"context_phrases is a sequence of phrases, got the string {self.context_phrases!r}")
        phrases = tuple(" ".join(str(p).split()) for p in self.context_phrases)
        if any(not p for p in phrases):
            raise DecodingOptionError("context_phrases: an empty phrase")
        object.__setattr__(self, "context_phrases", phrases)
        if self.context_bias_mode == "deep-biasing":
            raise DecodingOptionError("context_bias_mode deep-biasing needs a model trained with WeNet's context "
                                      "module, which asrkit does not have; use decoding-graph")
        if self.context_bias_mode not in ("", "decoding-graph"):
            raise DecodingOptionError(f"context_bias_mode must be decoding-graph, got {self.context_bias_mode!r}")
        if self.context_bias_mode and not phrases:
            raise DecodingOptionError("context_bias_mode decoding-graph needs phrases (--context_list_path), "
                                      "got none")
        if phrases:
            object.__setattr__(self, "context_bias_mode", "decoding-graph")
        if self.lm_path is not None and not str(self.lm_path):
            raise DecodingOptionError("lm_path is empty")
        if self.fused and not fused_modes(self.modes):
            raise DecodingOptionError(f"an LM and context biasing apply to {', '.join(fused_modes(REGISTRY))}; "
                                      f"none of the modes given ({' '.join(self.modes)}) takes them")

    @property
    def fused(self) -> bool:
        """Whether an LM or biasing phrases are asked for (:mod:`asrkit.decode.fusion`)."""
        return self.lm_path is not None or bool(self.context_phrases)

    def autocast(self, device_type: str):
        """The context the model passes run in: ``torch.autocast(device_type, dtype)`` for
        ``bf16``/``fp16``, nothing for ``fp32``."""
        if self.dtype == "fp32":
            return contextlib.nullcontext()
        import torch  # (deferred: the module docstring says why)
        return torch.autocast(device_type=device_type, dtype=getattr(torch, AUTOCAST_DTYPES[self.dtype]))

    @property
    def chunked(self) -> bool:
        """Whether the encoder sees chunks (``decoding_chunk_size > 0``), not full context."""
        return self.decoding_chunk_size > 0

    def encoder_context(self) -> str:
        """What the encoder sees, in words: ``full context`` or ``chunk N, left chunks M``
        (``, chunk by chunk`` with ``simulate_streaming``)."""
        if not self.chunked:
            return "full context"
        return (f"chunk {self.decoding_chunk_size}, left chunks {self.num_decoding_left_chunks}"
                + (", chunk by chunk" if self.simulate_streaming else ""))


# every field's default, by name: what a command line's option or a server's setting that sets
# the field defaults to
DEFAULTS = types.MappingProxyType({field.name: field.default for field in dataclasses.fields(DecodingOptions)})


def build_fusion(options: DecodingOptions, tokenizer):
    """The :class:`asrkit.decode.fusion.Fusion` of ``options`` (``lm_path``, ``lm_weight``,
    ``word_bonus``, ``lm_oov_penalty``, ``context_phrases``, ``context_graph_score``,
    ``context_strict``) for a model with ``tokenizer``'s units, or ``None`` when they ask for
    neither an LM nor biasing.  Raises :class:`asrkit.lm.arpa.ArpaError` for an LM file that
    is not a complete ARPA model and :class:`asrkit.decode.context_graph.ContextListError` for
    a phrase the model's units cannot spell (one line each)."""
    if not options.fused:
        return None
    # (deferred: the module docstring says why)
    from asrkit.decode.context_graph import build_context_graph, tokenize_phrases
    from asrkit.decode.fusion import Fusion, cached_lm, unit_kinds
    lm = cached_lm(options.lm_path) if options.lm_path is not None else None
    context = None
    if options.context_phrases:
        ids = tokenize_phrases(options.context_phrases, tokenizer)
        context = build_context_graph(ids, options.context_graph_score, tokenizer.vocab_size, options.context_strict)
    silent = (tokenizer.blank_id, tokenizer.sos_id, tokenizer.eos_id)
    kinds, texts = unit_kinds(tokenizer.symbols, bool(getattr(tokenizer, "split_with_space", False)), silent)
    return Fusion(lm, options.lm_weight, options.word_bonus, options.lm_oov_penalty, kinds, texts, context)


FULL_CONTEXT_ONLY = ("the model was trained with full context only (encoder_conf.use_dynamic_chunk false, "
                     "static_chunk_size 0)")


def check_encoder_context(options: DecodingOptions, chunk_trained: bool) -> None:
    """Refuse chunked decoding (``options.chunked``) of a model that was not trained with
    chunks (``chunk_trained``: :attr:`asrkit.models.chunks.ChunkTraining.chunked` of its
    config): its attention never saw a chunk, so what it decodes in chunks is garbled.
    Raises :class:`DecodingOptionError` saying so; full context is always accepted."""
    if options.chunked and not chunk_trained:
        raise DecodingOptionError(f"decoding_chunk_size {options.decoding_chunk_size}: {FULL_CONTEXT_ONLY}, "
                                  f"so decoding it in chunks garbles its output; decode with full context "
                                  f"or train a U2++ model (encoder_conf.use_dynamic_chunk true)")
