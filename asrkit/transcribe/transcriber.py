"""``asrkit.load_model(...).transcribe(...)``: a file or samples in, a
:class:`~asrkit.transcribe.result.Transcript` with token and word times out.

Audio is read with :func:`asrkit.data.audio.load_audio` (any sample rate and channel count
soundfile reads: WAV, FLAC, ...; channels averaged), resampled to the model's rate with
:func:`asrkit.data.audio.resample`, cut into the parts decoded one by one
(:mod:`asrkit.transcribe.segments`: the speech between pauses), and each part turned into
the features the model was trained on (:mod:`asrkit.transcribe.front_end`: Kaldi fbank, or
Whisper's log-mel) normalised as the model expects (the data-pipeline CMVN of the config,
when set).  Decoding is :mod:`asrkit.decode`'s: the encoder output of
:func:`asrkit.decode.batch.encoder_output` (or the archive's encoder), the mode from
:data:`asrkit.decode.modes.REGISTRY`; token times from the mode's search where it records them
(:attr:`asrkit.decode.modes.DecodingMode.timed`), else from :mod:`asrkit.decode.alignment`.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch

from asrkit.data.audio import DataFault, load_audio, resample
from asrkit.data.lists import ListEntry
from asrkit.decode.alignment import AlignmentError, best_path_spans, forced_alignment
from asrkit.decode.fusion import Fusion
from asrkit.decode.modes import REGISTRY, mode_nbest
from asrkit.decode.options import DEFAULTS, DecodingOptionError, DecodingOptions, build_fusion, check_encoder_context
from asrkit.decode.shared import SharedOutputs
from asrkit.precision import decoding_precision_warning
from asrkit.stream.recognizer import StreamingRecognizer
from asrkit.transcribe.loading import ModelLoadError, load_archive, load_experiment
from asrkit.transcribe.result import TokenTime, Transcript, group_words
from asrkit.transcribe.segments import Segment, Segmentation, fixed_pieces, speech_segments
from asrkit.transcribe.vad import VAD_RATE

log = logging.getLogger("asrkit.transcribe")

_FAULTS = {"missing_file": "no such file", "unreadable_audio": "not a readable audio file",
           "truncated_audio": "truncated audio file", "empty_audio": "no audio samples",
           "too_short": "too short"}


class AudioError(ValueError):
    """Input that cannot be transcribed: ``reason`` is ``missing_file``,
    ``unreadable_audio``, ``truncated_audio``, ``empty_audio`` or ``too_short``; the
    message is one line naming the input."""

    def __init__(self, source: str, reason: str, detail: str = ""):
        self.source, self.reason, self.detail = source, reason, detail
        text = _FAULTS.get(reason, reason)
        super().__init__(f"{source}: {text}" + (f" ({detail})" if detail else ""))


def _fault_detail(fault: DataFault, source: str) -> str:
    detail = fault.detail
    for prefix in (f"{source}: ", f"{source} "):
        if detail.startswith(prefix):
            detail = detail[len(prefix):]
    detail = re.sub(r"^Error opening <[^>]*>: ", "", detail.splitlines()[0] if detail else "")
    return "" if detail in ("does not exist", "no samples") else detail


def read_samples(audio, sample_rate: Optional[int]) -> tuple[torch.Tensor, int, str]:
    """``(samples [1, T] float32, rate, name)`` of a path or an array of samples."""
    if isinstance(audio, (str, os.PathLike)):
        if sample_rate is not None:
            raise ValueError("sample_rate is read from the file; pass it only with an array of samples")
        name = str(audio)
        try:
            wav, rate = load_audio(ListEntry(key=name, txt="", duration=0.0, wav=name))
        except DataFault as fault:
            raise AudioError(name, fault.reason, _fault_detail(fault, name)) from None
        return wav, rate, name
    if sample_rate is None or int(sample_rate) <= 0:
        raise ValueError("an array of samples needs its sample_rate (Hz)")
    samples = audio if isinstance(audio, torch.Tensor) else torch.from_numpy(np.asarray(audio))
    if samples.dtype == torch.int16:
        samples = samples.float() / 32768.0
    elif not samples.is_floating_point():
        raise ValueError(f"samples must be floats in [-1, 1) (or int16), got {samples.dtype}")
    if samples.dim() == 1:
        samples = samples.unsqueeze(0)
    elif samples.dim() == 2:  # [channels, T]
        samples = samples.mean(dim=0, keepdim=True)
    else:
        raise ValueError(f"samples must be [T] or [channels, T], got shape {tuple(samples.shape)}")
    if samples.numel() == 0:
        raise AudioError("<samples>", "empty_audio")
    return samples.detach().to("cpu", torch.float32), int(sample_rate), "<samples>"


class Transcriber:
    """A loaded model (see :func:`asrkit.transcribe.load_model`).  ``sample_rate``: the
    model's; ``units``: its unit symbols; ``description``: where it came from."""

    def __init__(self, backend, device: str = "cpu"):
        self.backend = backend
        self.device = device
        self.sample_rate = backend.sample_rate
        self.units = backend.units
        self.description = backend.description
        self._fusion: tuple = (None, None)  # (the options' fusion fields, their Fusion): the last one built
        self._warned_dtypes: set[str] = set()  # (a slow precision is said once per model, not per file)

    def check_mode(self, mode: str) -> None:
        """:class:`asrkit.decode.ModeError` unless this model runs decoding mode ``mode``."""
        self.backend.check_mode(mode)

    def check_options(self, options: DecodingOptions) -> None:
        """Raise what :meth:`transcribe_with_options` raises for ``options`` before it
        reads any audio: :class:`asrkit.decode.ModeError` for a mode this model does not
        run, :class:`asrkit.decode.DecodingOptionError` for several modes, ``reverse_weight
        > 0`` without a bitransformer decoder, or chunks on a model trained with full
        context only (:func:`asrkit.decode.options.check_encoder_context`)."""
        if len(options.modes) != 1:
            raise DecodingOptionError(f"transcription decodes with one mode, got {len(options.modes)}: "
                                      f"{' '.join(options.modes)}")
        self.check_mode(options.modes[0])
        if options.reverse_weight > 0.0 and not self.backend.bidirectional:
            raise DecodingOptionError("reverse_weight > 0 needs a model with decoder bitransformer")
        check_encoder_context(options, self.backend.chunk_trained)
        if options.fused and getattr(self.backend, "tokenizer", None) is None:  # (DecodingOptions checked the mode)
            raise DecodingOptionError(f"{self.description}: an exported archive's searches carry no LM and no "
                                      f"context graph; transcribe the experiment directory to use them")

    def fusion(self, options: DecodingOptions) -> Optional[Fusion]:
        """The LM and context graph of ``options`` (:func:`asrkit.decode.options.build_fusion`
        with this model's tokenizer), built once for the same fusion options."""
        if not options.fused:
            return None
        key = (options.lm_path, options.lm_weight, options.word_bonus, options.lm_oov_penalty,
               options.context_phrases, options.context_graph_score, options.context_strict)
        if self._fusion[0] != key:
            self._fusion = (key, build_fusion(options, self.backend.tokenizer))
        return self._fusion[1]

    def stream(self, options: DecodingOptions, *, fusion: Optional[Fusion] = None,
               nbest: bool = False) -> StreamingRecognizer:
        """A new stream over this model (as sherpa-onnx's ``create_stream()``): a
        :class:`asrkit.stream.recognizer.StreamingRecognizer` with this model's features (its
        sample rate and fbank options), chunk by chunk as ``options`` say (``decoding_chunk_size
        > 0``; its first mode is the stream's search), with ``fusion`` (default: the context
        graph and LM of ``options``, :meth:`fusion`) and, with ``nbest``, the search's n-best in
        each result.  Feed it samples at :attr:`sample_rate` (``accept_waveform``, which returns
        the results they complete), and end it with ``finish`` (the last results).  Raises
        :class:`asrkit.decode.DecodingOptionError` for an exported archive (its searches run
        whole utterances; sherpa-onnx streams an ONNX export), for a model trained with full
        context only (chunks would garble it) or for options without chunks, and
        :class:`asrkit.decode.ModeError` for a mode the model does not run."""
        model = getattr(self.backend, "model", None)
        if model is None:
            raise DecodingOptionError(f"{self.description}: an exported archive does not stream from Python; "
                                      f"stream the experiment directory, or export for sherpa-onnx "
                                      f"(asrkit.bin.export_onnx)")
        check_encoder_context(options, self.backend.chunk_trained)
        if fusion is None:
            fusion = self.fusion(options)
        return StreamingRecognizer(model, options, sample_rate=self.sample_rate, fusion=fusion, nbest=nbest,
                                   **self.backend.fbank_options())

    def features(self, wav: torch.Tensor) -> torch.Tensor:
        """Normalised features ``[T', F]`` of ``wav [T]`` (samples at the model's rate): the
        model's front end's (:mod:`asrkit.transcribe.front_end`), then its feature CMVN."""
        return self.backend.normalise(self.backend.front_end.features(wav))

    def segments(self, samples: torch.Tensor, rate: int, wav: torch.Tensor,
                 segmentation: Segmentation) -> list[Segment]:
        """The parts of ``wav [T]`` (``samples [1, T0]`` at ``rate`` Hz resampled to the
        model's rate) that are decoded one by one (:mod:`asrkit.transcribe.segments`)."""
        if not segmentation.vad:
            return fixed_pieces(wav.numel(), self.sample_rate, segmentation.max_segment_s)
        at_16k = wav if self.sample_rate == VAD_RATE else resample(samples, rate, VAD_RATE)[0]
        return speech_segments(at_16k.numpy(), self.sample_rate, wav.numel(), segmentation)

    def transcribe(self, audio: Union[str, os.PathLike, np.ndarray, torch.Tensor],
                   sample_rate: Optional[int] = None, mode: str = DEFAULTS["modes"][0],
                   chunk: Optional[int] = None, left_chunks: int = DEFAULTS["num_decoding_left_chunks"],
                   beam_size: int = DEFAULTS["beam_size"], ctc_weight: float = DEFAULTS["ctc_weight"],
                   reverse_weight: float = DEFAULTS["reverse_weight"], blank_penalty: float = DEFAULTS["blank_penalty"],
                   length_penalty: float = DEFAULTS["length_penalty"],
                   blank_skip_threshold: float = DEFAULTS["blank_skip_threshold"],
                   segmentation: Optional[Segmentation] = None,
                   progress: Optional[Callable[[float, float], None]] = None, dtype: str = DEFAULTS["dtype"],
                   lm_path: Optional[str] = DEFAULTS["lm_path"], lm_weight: float = DEFAULTS["lm_weight"],
                   word_bonus: float = DEFAULTS["word_bonus"], lm_oov_penalty: float = DEFAULTS["lm_oov_penalty"],
                   context_phrases: Sequence[str] = DEFAULTS["context_phrases"],
                   context_graph_score: float = DEFAULTS["context_graph_score"]) -> Transcript:
        """Transcribe ``audio``: a path (a WAV/FLAC file at any sample rate), or samples
        (a numpy array or tensor ``[T]`` or ``[channels, T]``, floats in [-1, 1) or int16)
        with their ``sample_rate``.

        ``mode``: a registered decoding mode (:data:`asrkit.decode.MODES`); ``chunk``: decode as a
        streaming model with chunks of that many encoder frames and ``left_chunks`` left
        chunks (-1: all; recognize's ``--decoding_chunk_size`` /
        ``--num_decoding_left_chunks``); ``None``, 0 or negative: full context.  The other
        options are those of :class:`asrkit.decode.DecodingOptions`, which they make up
        (see :meth:`transcribe_with_options`).  ``segmentation``: where audio is cut into
        parts decoded one by one (:class:`asrkit.transcribe.Segmentation`; ``None``: its
        defaults: the speech between the pauses the voice-activity detector finds).
        ``progress(done_s, total_s)``: called after each part with the seconds of audio done
        and in all.  ``dtype``: the precision of the model passes (``fp32``, ``bf16``,
        ``fp16``: autocast; CTC scores stay fp32).  ``lm_path`` (an ARPA file), ``lm_weight``,
        ``word_bonus``, ``lm_oov_penalty``; ``context_phrases`` (biasing towards these phrases, this call only) and
        ``context_graph_score``: LM fusion and contextual biasing (docs/decoding.md), for the
        modes that take them.

        Raises :class:`AudioError` for input that cannot be transcribed (missing, not
        audio, empty, shorter than the model's shortest input),
        :class:`asrkit.decode.ModeError` / :class:`asrkit.decode.DecodingOptionError` for
        a mode or option this model cannot run (:meth:`check_options`; ``chunk`` on a
        model trained with full context only among them)."""
        options = DecodingOptions(modes=(mode,), beam_size=beam_size, ctc_weight=ctc_weight,
                                  reverse_weight=reverse_weight, blank_skip_threshold=blank_skip_threshold,
                                  length_penalty=length_penalty, blank_penalty=blank_penalty,
                                  decoding_chunk_size=0 if chunk is None or chunk < 0 else int(chunk),
                                  num_decoding_left_chunks=left_chunks, dtype=dtype, lm_path=lm_path,
                                  lm_weight=lm_weight, word_bonus=word_bonus, lm_oov_penalty=lm_oov_penalty,
                                  context_phrases=tuple(context_phrases),
                                  context_graph_score=context_graph_score)
        return self.transcribe_with_options(audio, options, sample_rate, segmentation, progress)

    def transcribe_with_options(self, audio: Union[str, os.PathLike, np.ndarray, torch.Tensor],
                                options: DecodingOptions, sample_rate: Optional[int] = None,
                                segmentation: Optional[Segmentation] = None,
                                progress: Optional[Callable[[float, float], None]] = None,
                                nbest: int = 1) -> Transcript:
        """:meth:`transcribe` with the decoding options built beforehand (as ``asrkit
        transcribe`` builds them once for all its files): ``options.modes`` holds the one
        mode; ``batch_size`` does not apply, nor ``simulate_streaming`` to an exported
        archive (whose encoder has no chunk-by-chunk form).  Raises as :meth:`transcribe`.
        ``nbest`` > 1: :attr:`Transcript.nbest` holds each part's hypotheses, up to ``nbest``,
        best first (:func:`asrkit.decode.modes.mode_nbest`: the mode's own n-best, one
        hypothesis for a mode without one); the first is the part's result.

        Memory: the samples (and their copy at the model's rate and at 16 kHz, where those
        differ) plus one part's features and decoding, whatever the length.

        ``options.dtype`` ``bf16`` on a CPU without native bf16 logs training's warning
        (:func:`asrkit.precision.decoding_precision_warning`), once per model."""
        self.check_options(options)
        fusion = self.fusion(options)
        if options.dtype not in self._warned_dtypes:
            self._warned_dtypes.add(options.dtype)
            slow = decoding_precision_warning(options.dtype, self.device)  # (bf16 emulated on this CPU)
            if slow:
                log.warning("%s", slow)
        mode = options.modes[0]
        b = self.backend
        samples, rate, name = read_samples(audio, sample_rate)
        wav = resample(samples, rate, b.sample_rate)[0]
        duration = samples.size(1) / rate
        if b.front_end.frames(wav.numel()) < b.min_input_length:
            raise AudioError(name, "too_short", f"{duration:.3f} s; the model needs "
                             f"{b.min_input_length} feature frames, {self._min_input_ms():g} ms")
        segments = self.segments(samples, rate, wav, segmentation or Segmentation())
        del samples  # (the model-rate copy is all that is read from here on)
        decoded = []
        for segment in segments:
            segment = self._at_least_min_input(segment, wav.numel())
            decoded.append((segment, *self._decode(self.features(wav[segment.start:segment.end]), mode, options,
                                                   fusion, nbest)))
            if progress is not None:
                progress(min(duration, segment.end / b.sample_rate), duration)
        if progress is not None and not segments:
            progress(duration, duration)
        return self._transcript(decoded, duration, mode, nbest > 1)

    def _min_input_samples(self) -> int:
        """The model's shortest input in samples (its minimum feature frames)."""
        return self.backend.front_end.min_samples(self.backend.min_input_length)

    def _min_input_ms(self) -> float:
        """The model's shortest input in milliseconds of audio (its minimum feature frames)."""
        return 1000.0 * self._min_input_samples() / self.backend.sample_rate

    def _at_least_min_input(self, segment: Segment, num_samples: int) -> Segment:
        """``segment`` widened (forward, then back) to the model's shortest input where it is
        shorter: a short last piece of fixed-length cutting."""
        need = self._min_input_samples()
        if segment.end - segment.start >= need:
            return segment
        end = min(num_samples, segment.start + need)
        return Segment(max(0, end - need), end)

    @torch.inference_mode()
    def _decode(self, feats: torch.Tensor, mode: str, options: DecodingOptions, fusion: Optional[Fusion] = None,
                nbest: int = 1) -> tuple[list[int], Optional[list[tuple[int, int]]], list[list[int]]]:
        """Token ids of one segment and their spans in its encoder frames: the emission frame
        of a mode whose search records it (:attr:`~asrkit.decode.modes.DecodingMode.timed`:
        one frame per token), else the CTC alignment of the tokens
        (``None``: no CTC head, or tokens the CTC frames cannot hold); and up to ``nbest``
        hypotheses, best first (:func:`mode_nbest`), the ids first."""
        b = self.backend
        x = feats.unsqueeze(0).to(self.device)
        with options.autocast(x.device.type):
            enc, lengths = b.encode(x, torch.tensor([x.size(1)], device=self.device), options)
            shared = SharedOutputs.from_options(b.searcher, enc, lengths, options, b.decoding_source, fusion)
            timed = REGISTRY[mode].timed
            if timed is not None:  # (the search's own emission frames)
                hyp = timed(shared)[0]
                ids = [int(t) for t in hyp.tokens]
                others = mode_nbest(mode, shared)[0][1:nbest] if nbest > 1 else []
                return ids, [(f, f + 1) for f in hyp.frames], [ids] + [[int(t) for t in h] for h in others]
            if nbest > 1:  # (the mode's n-best, its result first: one search)
                hyps = [[int(t) for t in h] for h in mode_nbest(mode, shared)[0][:nbest]]
                ids = hyps[0]
            else:
                ids = [int(t) for t in REGISTRY[mode].run(shared)[0]]
                hyps = [ids]
            if not b.has_ctc:
                return ids, None, hyps
            log_probs = shared.log_probs()[0, :int(lengths[0])].float().cpu()
        try:
            found = (best_path_spans(log_probs, b.blank) if mode == "ctc_greedy_search"
                     else forced_alignment(log_probs, ids, b.blank))
        except AlignmentError:
            return ids, None, hyps
        return ids, [(s.start, s.end) for s in found], hyps

    def _transcript(self, decoded: Sequence[tuple[Segment, list[int], Optional[list[tuple[int, int]]],
                                                  list[list[int]]]],
                    duration: float, mode: str, with_nbest: bool = False) -> Transcript:
        """Segment results joined: tokens and times concatenated (times offset by the
        segment start), texts joined with a space, words grouped per segment (a segment
        boundary is a word boundary); times ``None`` if any segment has none."""
        b = self.backend
        frame_s = b.subsampling * b.frame_shift / 1000.0
        tokens: list[str] = []
        times: Optional[list[TokenTime]] = [] if b.has_ctc or REGISTRY[mode].timed is not None else None
        words: list = []
        texts: list[str] = []
        for segment, ids, spans, _ in decoded:
            seg_tokens = [b.units[i] for i in ids]
            tokens += seg_tokens
            texts.append(b.text(ids))
            if times is not None and spans is not None:
                offset = segment.start / b.sample_rate
                seg_times = [TokenTime(tok, offset + s * frame_s, offset + e * frame_s)
                             for tok, (s, e) in zip(seg_tokens, spans)]
                times += seg_times
                words += group_words(seg_times, b.space_separated)
            else:
                times = None
        parts = [(s.start / b.sample_rate, min(duration, s.end / b.sample_rate)) for s, _, _, _ in decoded]
        nbest = [[b.text(h) for h in hyps] for _, _, _, hyps in decoded] if with_nbest else None
        return Transcript(" ".join(t for t in texts if t), tokens, times, None if times is None else words,
                          parts, duration, mode, nbest)


def load_model(source: Union[str, os.PathLike], checkpoint: Optional[Union[str, os.PathLike]] = None,
               device: str = "cpu", overrides: Sequence[str] = ()) -> Transcriber:
    """A :class:`Transcriber` for ``source``:

    * an experiment directory: its ``train.yaml`` (with ``overrides``, ``KEY.PATH=VALUE``
      as recognize's ``--override``; relative file paths resolved as
      :func:`asrkit.config_files.resolve_config_paths` says) and ``checkpoint``, or
      by default the one :func:`asrkit.transcribe.loading.find_checkpoint` picks
      (``avg_<N>.pt`` with the largest N, else ``final.pt``, else the newest
      ``epoch_*``/``step_*`` checkpoint by recorded step);
    * an exported archive (``final.zip`` of ``asrkit.bin.export``; takes neither
      ``checkpoint`` nor ``overrides``).

    ``device``: where the model runs (``cpu``, ``cuda``, ...).  Raises
    :class:`asrkit.transcribe.loading.ModelLoadError` (or the config/units/checkpoint
    loaders' own errors, all ``ValueError``/``RuntimeError`` with one-line messages)."""
    path = Path(source)
    if path.is_dir():
        backend = load_experiment(path, checkpoint, device, list(overrides))
    elif path.is_file():
        if checkpoint is not None or overrides:
            raise ModelLoadError(f"{path}: an exported archive takes no checkpoint or overrides")
        backend = load_archive(path, device)
    else:
        raise ModelLoadError(f"no experiment directory or exported archive at {path}")
    return Transcriber(backend, device)
