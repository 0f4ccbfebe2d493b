"""The model a server shares among its streams: :class:`ServedModel` wraps a loaded
:class:`asrkit.transcribe.Transcriber` with the server's decoding settings, says which kind of
stream the model gets, and makes sessions and file transcripts.

Which kind (:attr:`ServedModel.kind`): ``chunks`` (streamed chunk by chunk, partial results
per chunk) for an experiment directory trained with chunks (dynamic or static) whose features
need no data-pipeline CMVN; ``segments`` (endpointed segments decoded whole, partial results
from re-decoding the segment so far at a bounded rate) for a model trained with full context
only -- which chunked decoding would garble -- and for an exported archive (whose encoder has
no chunk-by-chunk form).

A stream at any rate from :data:`MIN_STREAM_RATE` to :data:`MAX_STREAM_RATE` Hz (telephony's
8 kHz, a browser's 44.1 or 48 kHz) is decoded at the model's rate: a chunk session resamples it
piece by piece (:class:`asrkit.stream.resample.StreamResampler`, the filter the data pipeline
and ``transcribe`` use, so the text is that of the same audio resampled whole), a segment
session hands its segments with their rate to the transcriber, which resamples them.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from pathlib import Path

from asrkit.decode.context_graph import ContextListError
from asrkit.decode.modes import REGISTRY, ModeError, partial_modes
from asrkit.decode.options import DEFAULTS, DecodingOptionError, DecodingOptions, build_fusion
from asrkit.serve.protocol import Start
from asrkit.serve.session import ChunkSession, SegmentSession
from asrkit.stream.searches import streamed_modes
from asrkit.transcribe import AudioError


MIN_STREAM_RATE, MAX_STREAM_RATE = 8000, 48000  # Hz: the stream rates taken (and resampled)


class SettingsError(ValueError):
    """A server setting out of range, or one the model cannot run (one line)."""


class SessionError(ValueError):
    """A stream the model cannot serve as asked (its text is the ``failed`` message)."""


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """How streams are decoded: ``mode`` (the final result's; partial results of a chunk
    session come from the mode's stream search, of a segment session from the first
    registered mode the model runs that is cheap enough, :func:`asrkit.decode.modes.partial_modes`,
    else ``mode``), ``chunk`` (encoder frames per chunk of a chunk-trained model) and
    ``left_chunks`` (-1: all), ``beam_size``, ``ctc_weight``, ``reverse_weight`` (the defaults
    of all but ``chunk`` are :class:`~asrkit.decode.options.DecodingOptions`');
    ``partial_interval_s``: how often a full-context model's segment is checked and
    re-decoded (seconds of audio)."""

    mode: str = DEFAULTS["modes"][0]
    chunk: int = 16
    left_chunks: int = DEFAULTS["num_decoding_left_chunks"]
    beam_size: int = DEFAULTS["beam_size"]
    ctc_weight: float = DEFAULTS["ctc_weight"]
    reverse_weight: float = DEFAULTS["reverse_weight"]
    partial_interval_s: float = 0.5

    def __post_init__(self):
        if self.chunk < 1:
            raise SettingsError(f"chunk must be >= 1 encoder frames, got {self.chunk}")
        if not (math.isfinite(self.partial_interval_s) and 0.1 <= self.partial_interval_s <= 10.0):
            raise SettingsError(f"partial_interval_s must be in [0.1, 10], got {self.partial_interval_s}")

    def options(self, chunked: bool) -> DecodingOptions:
        try:
            return DecodingOptions(modes=(self.mode,), beam_size=self.beam_size, ctc_weight=self.ctc_weight,
                                   reverse_weight=self.reverse_weight,
                                   decoding_chunk_size=self.chunk if chunked else 0,
                                   num_decoding_left_chunks=self.left_chunks)
        except (DecodingOptionError, ModeError) as e:
            raise SettingsError(str(e)) from None


def served_modes(kind: str) -> list[str]:
    """The registered modes a server decodes a model of ``kind`` in (:attr:`ServedModel.kind`):
    for ``chunks`` those a stream runs (:func:`asrkit.stream.searches.streamed_modes`), for
    ``segments`` every one (what the model itself can run aside)."""
    return streamed_modes() if kind == "chunks" else list(REGISTRY)


def _runs(transcriber, mode: str) -> bool:
    try:
        transcriber.check_mode(mode)
    except ModeError:
        return False
    return True


class ServedModel:
    """``transcriber`` (:func:`asrkit.transcribe.load_model`) served with ``settings``.
    Raises :class:`SettingsError` for settings the model cannot run."""

    def __init__(self, transcriber, settings: ServeSettings = ServeSettings()):
        self.transcriber, self.settings = transcriber, settings
        backend = transcriber.backend
        chunked = (hasattr(backend, "model") and backend.chunk_trained
                   and getattr(backend, "feature_cmvn", None) is None)
        self.kind = "chunks" if chunked else "segments"
        self.options = settings.options(chunked)
        try:
            transcriber.check_options(self.options)
        except (DecodingOptionError, ModeError) as e:
            raise SettingsError(str(e).splitlines()[0]) from None
        if settings.mode not in served_modes(self.kind):
            raise SettingsError(f"mode {settings.mode}: a model streamed chunk by chunk is decoded in one of "
                                f"{', '.join(served_modes(self.kind))}")
        partial = next((mode for mode in partial_modes() if _runs(transcriber, mode)), settings.mode)
        self.partial_options = dataclasses.replace(self.options, modes=(partial,))
        self.file_options = dataclasses.replace(self.options, decoding_chunk_size=0)
        self.sample_rate = int(backend.sample_rate)

    @property
    def name(self) -> str:
        return self.transcriber.description

    def describe(self) -> str:
        """One line: the model and how its streams are decoded (the server's log and page)."""
        how = (f"streamed chunk by chunk (chunk {self.options.decoding_chunk_size} encoder frames)"
               if self.kind == "chunks" else
               f"full context: endpointed segments decoded whole, partial results re-decoded every "
               f"{self.settings.partial_interval_s:g} s of audio")
        return f"{self.name}: {len(self.transcriber.units)} units, {self.options.modes[0]}, {how}"

    def info(self) -> dict:
        """What the page shows (JSON-ready)."""
        return {"model": self.name, "kind": self.kind, "description": self.describe(),
                "mode": self.options.modes[0], "chunk": self.options.decoding_chunk_size,
                "sample_rate": self.sample_rate, "num_units": len(self.transcriber.units),
                "units": list(self.transcriber.units)[:200]}

    def new_session(self, start: Start):
        """A session for ``start``'s stream; :class:`SessionError` when the model cannot
        serve it (a sample rate outside 8000-48000 Hz, phrases it cannot take)."""
        if not MIN_STREAM_RATE <= start.sample_rate <= MAX_STREAM_RATE:
            raise SessionError(f"sample_rate {start.sample_rate}: streams of {MIN_STREAM_RATE}-{MAX_STREAM_RATE} Hz "
                               f"are taken (resampled to this model's {self.sample_rate} Hz)")
        options, fusion = self.options, None
        if start.context:
            tokenizer = getattr(self.transcriber.backend, "tokenizer", None)
            if tokenizer is None:
                raise SessionError("context: an exported archive takes no context phrases")
            try:
                options = dataclasses.replace(options, context_phrases=start.context)
                fusion = build_fusion(options, tokenizer)
            except (DecodingOptionError, ContextListError) as e:
                raise SessionError(f"context: {str(e).splitlines()[0]}") from None
        if self.kind == "chunks":
            return ChunkSession(self, start.sample_rate, options, fusion, start.nbest)
        return SegmentSession(self, start.sample_rate, options, nbest=start.nbest)

    def transcribe_bytes(self, data: bytes, filename: str = "") -> dict:
        """``transcribe``'s JSON of an uploaded file (any format it reads; full context,
        cut at pauses).  Raises :class:`asrkit.transcribe.AudioError` for what it cannot read."""
        suffix = Path(filename).suffix
        suffix = suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix) else ".audio"  # (soundfile reads the bytes)
        with tempfile.TemporaryDirectory(prefix="asrkit-serve-") as tmp:
            path = os.path.join(tmp, "upload" + suffix)
            with open(path, "wb") as f:
                f.write(data)
            try:
                result = self.transcriber.transcribe_with_options(path, self.file_options)
            except AudioError as e:
                raise AudioError(filename or "upload", e.reason, e.detail.replace(path, filename)) from None
        return {"path": filename or "upload", **result.to_dict()}
