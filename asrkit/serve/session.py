"""One stream's recognition state, in one of two kinds, picked by the model
(:class:`asrkit.serve.model.ServedModel`):

* :class:`ChunkSession` -- a chunk-trained model streamed chunk by chunk: a
  :class:`asrkit.stream.recognizer.StreamingRecognizer` (partial results after every chunk,
  a rescored final result at each endpoint and at the end; its endpoints read silence from
  the CTC blank probabilities);
* :class:`SegmentSession` -- a full-context model, which chunks would garble, is never
  chunk-decoded: audio collects into the current segment; every ``partial_interval_s`` of
  audio the segment so far is checked for an endpoint (the voice-activity detector's speech
  probabilities through the streaming recognizer's endpoint rules: 1 s of non-speech after
  speech, 5 s without speech, 20 s of segment) and either finalised (decoded whole from its
  first speech region to its last, padded as ``transcribe`` pads a part -- the non-speech
  around them is not decoded --; up to ``nbest`` hypotheses, the mode's own n-best, the
  non-best ones without word times) or re-decoded for a partial result (``ctc_greedy_search``
  where the model has CTC, the best hypothesis only; at most once per message).  Checks fall
  at fixed audio positions, so the final results do not depend on how the client cuts its
  messages.

In both, a segment in which the voice-activity detector finds no speech gives no text, as
``transcribe`` gives none for it (:func:`has_speech`, ``transcribe``'s own decision): a model
emits tokens on silence, noise or tones that no one spoke (a full-context model decoding 5 s
of digital zeros whole, a chunk model on a tone).  Its final result is one empty hypothesis
without word times, and it gives no partial result; a segment with speech is decoded exactly
as without the check.  A final result checks the whole segment; partial results are checked
on the segment so far until one finds speech, and the segment's later partial results follow
unchecked (the detector runs over the segment so far, so checking every partial would cost
a detector pass over the segment per chunk).  A chunk session checks only where there is
text to withhold (a hypothesis with tokens); a segment session checks before decoding, and
does not decode a segment without speech.

Both take 16-bit PCM bytes and give :class:`Event` lists; neither is thread-safe (the server
runs one call of a stream at a time).  A chunk session also runs in steps, for the server's
batcher (:mod:`asrkit.serve.chunk_batcher`) to run several streams' chunks through the encoder
together.  State is bounded: a chunk session keeps one segment's
encoder frames and samples, a segment session one segment's samples (at most the endpoint
rules' 20 s, plus a chunk or one interval, plus what a client's message holds beyond them).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import torch

from asrkit.data.audio import resample
from asrkit.decode.alignment import AlignmentError, forced_alignment
from asrkit.stream.endpoint import DEFAULT_RULES, EndpointDetector
from asrkit.stream.recognizer import Result
from asrkit.stream.resample import StreamResampler
from asrkit.transcribe import AudioError, Segmentation
from asrkit.transcribe.result import TokenTime, WordTime, group_words
from asrkit.transcribe.segments import speech_regions_16k
from asrkit.transcribe import vad


@dataclasses.dataclass(frozen=True)
class Event:
    """A partial (``final`` False) or final result: its hypotheses' texts, best first (one for a
    segment session's partial), and for finals each one's word times (seconds since the stream
    started; ``None`` where the model gives none)."""

    final: bool
    texts: list[str]
    words: list[Optional[list[WordTime]]] = dataclasses.field(default_factory=list)

    @property
    def text(self) -> str:
        return self.texts[0]


def pcm_to_float(data: bytes) -> torch.Tensor:
    """16-bit little-endian PCM as floats in [-1, 1)."""
    return torch.from_numpy(np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0)


def at_vad_rate(samples: np.ndarray, rate: int) -> np.ndarray:
    """``samples`` (float32 ``[T]`` at ``rate`` Hz) at the voice-activity detector's 16 kHz."""
    if rate == vad.VAD_RATE:
        return samples
    return resample(torch.from_numpy(np.ascontiguousarray(samples))[None], rate, vad.VAD_RATE)[0].numpy()


def has_speech(samples_16k: np.ndarray, probs: Optional[np.ndarray] = None) -> bool:
    """Whether ``transcribe`` decodes anything of audio whose 16 kHz version is ``samples_16k``
    (:func:`at_vad_rate`): whether the cutting ``asrkit transcribe`` and the server's upload
    do (:meth:`asrkit.transcribe.Transcriber.segments` with the default :class:`Segmentation`)
    gives at least one part -- one per speech region
    (:func:`asrkit.transcribe.segments.speech_regions_16k`).  It
    gives none where the voice-activity detector finds no speech (digital silence, noise,
    tones), and ``transcribe`` then decodes nothing and its text is empty.  ``probs``: the
    detector's probabilities of ``samples_16k`` when already computed."""
    return bool(speech_regions_16k(np.ascontiguousarray(samples_16k, dtype=np.float32), Segmentation(), probs))


class ChunkSession:
    """A stream through :class:`~asrkit.stream.recognizer.StreamingRecognizer` (``served``: the
    :class:`~asrkit.serve.model.ServedModel`; ``options``: this stream's decoding options,
    ``fusion``: their phrases' context graph, :func:`asrkit.decode.options.build_fusion`;
    ``nbest``: hypotheses per result)."""

    kind = "chunks"

    def __init__(self, served, sample_rate: int, options, fusion=None, nbest: int = 1):
        backend = served.transcriber.backend
        self.backend, self.n = backend, nbest
        self.rate = sample_rate
        # the features at the model's rate: a stream at another rate is resampled on the way in
        self.resampler = StreamResampler(sample_rate, backend.sample_rate)
        self.recognizer = served.transcriber.stream(options, fusion=fusion, nbest=True)
        self.frame_s = backend.subsampling * backend.frame_shift / 1000.0
        self.chunks, self.chunks_s, self.encoder_s = 0, 0.0, 0.0  # chunks run, their compute, its encoder part
        # The samples the voice-activity check reads (module docstring): the stream's from the
        # current segment's first chunk on.  Chunk k starts at feature frame k * stride (every
        # chunk but the stream's last moves the features on by one stride), so a segment whose
        # first chunk is the k-th starts at k * stride frames -- the recognizer's
        # segment_start_s -- and times are feature frames x frame shift, as the recognizer's.
        self.stride_s = self.recognizer.stride * self.recognizer.frame_shift_s
        self.samples = np.zeros(0, dtype=np.float32)
        self.samples_from = 0          # the stream's sample index of samples[0]
        self.speech_found = False      # a partial result of the current segment found speech

    def accept(self, data: bytes) -> list[Event]:
        self._keep(data)
        return self._events(self.recognizer.accept_waveform(self.resampler.accept(pcm_to_float(data))))

    def finish(self) -> list[Event]:
        events = self._events(self.recognizer.accept_waveform(self._resampler_tail()))
        return events + self._events(self.recognizer.finish())

    def _resampler_tail(self) -> torch.Tensor:
        """The resampler's last samples; the next audio (the features start over too) starts anew."""
        tail = self.resampler.finish()
        self.resampler = StreamResampler(self.resampler.orig_rate, self.resampler.new_rate)
        return tail

    # accept and finish in steps, the encoder of full chunks run by the server's batcher
    # (asrkit.serve.chunk_batcher): feed (or end_input at the end); while next_window() gives a window,
    # the batcher's encode, then advance; at the end finish_chunks.

    def feed(self, data: bytes) -> None:
        self._keep(data)
        self.recognizer.add_waveform(self.resampler.accept(pcm_to_float(data)))

    def end_input(self) -> None:
        self.recognizer.add_waveform(self._resampler_tail())
        self.recognizer.end_input()

    def next_window(self) -> Optional[torch.Tensor]:
        return self.recognizer.next_window()

    def advance(self, window: torch.Tensor, out: torch.Tensor, encoder_s: float) -> list[Event]:
        return self._events(self.recognizer.advance(window, out, encoder_s))

    def finish_chunks(self) -> list[Event]:
        return self._events(self.recognizer.finish_chunks())

    def _keep(self, data: bytes) -> None:
        self.samples = np.concatenate([self.samples, pcm_to_float(data).numpy()])

    def _speech(self, end_s: float) -> bool:
        """:func:`has_speech` of the current segment's samples up to ``end_s`` (seconds since
        the stream started: a result's ``audio_s``)."""
        return has_speech(at_vad_rate(self.samples[:max(0, round(end_s * self.rate) - self.samples_from)], self.rate))

    def _events(self, results: list[Result]) -> list[Event]:
        events = []
        for r in results:
            if not r.final:
                self.chunks, self.chunks_s, self.encoder_s = (self.chunks + 1, self.chunks_s + r.compute_s,
                                                              self.encoder_s + r.encoder_s)
            nbest = (r.nbest or [r.tokens])[:self.n]  # (the hypotheses the client asked for, no more)
            if r.final:
                if any(nbest) and not self._speech(r.audio_s):
                    events.append(Event(True, [""], [[]]))
                else:
                    log_probs = None
                    if r.encoder_out is not None and self.backend.has_ctc:
                        with torch.inference_mode():
                            log_probs = self.backend.searcher.ctc_log_probs(r.encoder_out)[0].float()
                    events.append(Event(True, [self.backend.text(h) for h in nbest],
                                        [self._words(h, log_probs, r.segment_start_s) for h in nbest]))
                # the next segment starts with the next chunk: its samples are all the check reads
                start = round(self.chunks * self.stride_s * self.rate)
                self.samples = self.samples[max(0, start - self.samples_from):]
                self.samples_from = max(self.samples_from, start)
                self.speech_found = False
            elif r.tokens and (self.speech_found or self._speech(r.audio_s)):
                self.speech_found = True
                events.append(Event(False, [self.backend.text(h) for h in nbest]))
        return events

    def _words(self, tokens: list[int], log_probs: Optional[torch.Tensor], start_s: float
               ) -> Optional[list[WordTime]]:
        """The words of ``tokens``, timed by their CTC alignment to the segment's frames
        (``log_probs``; the segment starts at ``start_s``)."""
        b = self.backend
        if not tokens:
            return []
        if log_probs is None:
            return None
        try:
            spans = forced_alignment(log_probs, tokens, b.blank)
        except AlignmentError:
            return None
        times = [TokenTime(b.units[s.token], start_s + s.start * self.frame_s, start_s + s.end * self.frame_s)
                 for s in spans]
        return group_words(times, b.space_separated)


class SegmentSession:
    """A stream through a full-context model: segments decoded whole, a segment without speech
    not at all (module docstring)."""

    kind = "segments"

    def __init__(self, served, sample_rate: int, options, fusion=None, nbest: int = 1):
        self.served, self.n = served, nbest
        self.rate = sample_rate
        self.step = max(1, int(served.settings.partial_interval_s * sample_rate))
        self.segment = np.zeros(0, dtype=np.float32)   # the current segment's samples
        self.pending = np.zeros(0, dtype=np.float32)   # samples not yet stepped into it
        self.offset_s = 0.0                            # where the segment starts in the stream
        self.options, self.partial_options = options, served.partial_options  # (transcribe builds the fusion)
        frame_s = vad.FRAME_SAMPLES / vad.VAD_RATE
        self.endpoint = EndpointDetector(frame_s, DEFAULT_RULES, 1.0 - Segmentation().speech_threshold)
        self.speech_found = False  # a partial result of the current segment found speech

    def accept(self, data: bytes) -> list[Event]:
        samples = pcm_to_float(data).numpy()
        self.pending = np.concatenate([self.pending, samples])
        events = []
        while self.pending.size >= self.step:
            self.segment = np.concatenate([self.segment, self.pending[:self.step]])
            self.pending = self.pending[self.step:]
            events += self._check(partial=self.pending.size < self.step)
        return events

    def finish(self) -> list[Event]:
        self.segment = np.concatenate([self.segment, self.pending])
        self.pending = self.pending[:0]
        return [self._final(at_vad_rate(self.segment, self.rate))]

    def _check(self, partial: bool = True) -> list[Event]:
        """Finalise the segment at an endpoint, else re-decode it for a partial result (only
        at the last check of a message: audio sent faster than real time is not re-decoded
        at every step)."""
        at_16k = at_vad_rate(self.segment, self.rate)
        probs = vad.speech_probabilities(at_16k)  # (one detector pass: the endpoint and the speech check)
        self.endpoint.reset()
        self.endpoint.accept(torch.from_numpy(1.0 - probs))
        if self.endpoint.detected():
            return [self._final(at_16k, probs)]
        if not partial:
            return []
        if not self.speech_found:
            if not has_speech(at_16k, probs):
                return []
            self.speech_found = True
        texts, _ = self._decode(self.partial_options)
        return [Event(False, texts)] if texts[0] else []

    def _decode(self, options, nbest: int = 1, span: Optional[tuple[int, int]] = None
                ) -> tuple[list[str], Optional[list[WordTime]]]:
        """The hypothesis texts (up to ``nbest``, best first) of the segment's samples ``span``
        (default: all of them), and the best one's word times."""
        start, end = span or (0, self.segment.size)
        try:
            t = self.served.transcriber.transcribe_with_options(
                torch.from_numpy(self.segment[start:end]), options, self.rate, segmentation=Segmentation.whole(),
                nbest=nbest)
        except AudioError:  # (shorter than the model's shortest input)
            return [""], []
        shift = self.offset_s + start / self.rate
        words = None if t.words is None else [WordTime(w.word, w.start + shift, w.end + shift) for w in t.words]
        return ([t.text] + t.nbest[0][1:] if t.nbest else [t.text]), words

    def _final(self, at_16k: np.ndarray, probs: Optional[np.ndarray] = None) -> Event:
        """The segment's final result and a new segment.  The segment (its 16 kHz samples
        ``at_16k``, their detector ``probs`` when computed) is decoded whole from its first
        speech region's start to its last one's end, each padded as ``transcribe`` pads a part
        (:func:`asrkit.transcribe.segments.speech_regions_16k`): the non-speech before and after
        -- up to the endpoint rules' 5 s, or a microphone's first digital zeros -- is not
        decoded, as a model emits tokens on it that no one spoke.  Without a speech region
        (:func:`has_speech`) the result is one empty hypothesis without word times."""
        regions = speech_regions_16k(np.ascontiguousarray(at_16k, dtype=np.float32), Segmentation(), probs)
        if regions:
            scale = self.rate / vad.VAD_RATE
            span = (int(regions[0][0] * scale), min(self.segment.size, int(np.ceil(regions[-1][1] * scale))))
            texts, words = self._decode(self.options, self.n, span)
        else:
            texts, words = [""], []
        self.offset_s += self.segment.size / self.rate
        self.segment = self.segment[:0]
        self.speech_found = False
        return Event(True, texts, [words] + [[] for _ in texts[1:]])  # (the others: no word times)
