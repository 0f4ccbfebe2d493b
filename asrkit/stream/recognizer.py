"""Streaming recognition: audio in pieces of any size in, partial results per chunk out,
a rescored final result per segment.

:class:`StreamingRecognizer` runs one stream through the model's streaming encoder:

1. :class:`~asrkit.stream.features.StreamingFbank` turns the samples into fbank frames
   (equal to the whole-utterance fbank), the model's CMVN layer normalises them;
2. every ``decoding_chunk_size`` encoder frames, :meth:`BaseEncoder.forward_chunk` runs on the
   window of ``(chunk − 1)·rate + right_context + 1`` feature frames that produces them,
   with the attention cache of ``num_decoding_left_chunks`` chunks (all when < 0) and the causal
   convolution's cache -- what :meth:`BaseEncoder.forward_chunk_by_chunk` does for a
   whole utterance, so the encoder frames equal it;
3. the chunk's encoder frames advance the segment's search (:mod:`asrkit.stream.searches`):
   the incremental CTC prefix beam search, or for a transducer mode the transducer search
   with its predictor state carried across chunks; its best is the partial result;
4. at an endpoint (:class:`~asrkit.stream.endpoint.EndpointDetector`, on the frames' blank
   probabilities: CTC's, or the transducer joint's) or at :meth:`finish`, the search's
   final result over all of the segment's encoder frames is emitted (attention rescoring
   with ``ctc_weight`` and ``reverse_weight`` for CTC; the mode's own for a transducer) and
   the encoder, search and endpoint state start over -- the feature frames not yet
   consumed carry on into the next segment.

A segment's final result equals what decoding the same encoder frames offline gives:
``ctc_prefix_beam_search`` + ``attention_rescoring``, or the transducer mode (same searches,
same code).
Times are audio seconds since the stream started (feature frames × frame shift).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

import torch

from asrkit.decode.fusion import Fusion
from asrkit.decode.modes import REGISTRY, check_modes, fused_modes
from asrkit.decode.options import DecodingOptionError, DecodingOptions
from asrkit.decode.searcher import Searcher
from asrkit.stream.endpoint import DEFAULT_RULES, EndpointDetector, EndpointRule
from asrkit.stream.features import StreamingFbank
from asrkit.stream.searches import stream_search


def check_stream_fusion(options: DecodingOptions, fusion: Optional[Fusion]) -> None:
    """Refuse (one line) an LM or phrases the stream's mode does not take, or that were asked
    for without the :class:`Fusion` built from them (or one given without being asked for)."""
    mode = options.modes[0]
    if options.fused and not REGISTRY[mode].fused:
        raise DecodingOptionError(f"mode {mode} takes no LM and no context phrases; use one of "
                                  f"{', '.join(fused_modes(REGISTRY))}")
    if options.fused != (fusion is not None):
        raise DecodingOptionError("an LM or context phrases in the options need fusion=build_fusion(options, "
                                  "tokenizer), and fusion needs them in the options")


@dataclasses.dataclass(frozen=True)
class Result:
    """A partial (``final`` False) or final result of the current segment."""

    tokens: list[int]
    final: bool
    audio_s: float        # audio time of the last feature frame the result has seen
    compute_s: float      # wall time spent on the chunk (or the finalisation) that produced it
    # finals only: the segment's encoder frames [1, T, D] (None: none) and the audio time of its
    # first feature frame; encoder frame i starts at segment_start_s + i * subsampling * frame shift
    encoder_out: Optional[torch.Tensor] = dataclasses.field(default=None, compare=False, repr=False)
    segment_start_s: float = 0.0
    # with nbest=True (CTC searches): the hypotheses, best first (a partial's prefixes; a final's
    # n-best ranked by the rescoring, ``tokens`` first)
    nbest: Optional[list[list[int]]] = dataclasses.field(default=None, compare=False, repr=False)
    # partials: the encoder's part of compute_s (a batch's time shared among its chunks)
    encoder_s: float = dataclasses.field(default=0.0, compare=False)


class StreamingRecognizer:
    """One stream through a streaming model (causal convolution, or none; any encoder with
    ``forward_chunk``), decoded with ``options``
    (:class:`asrkit.decode.options.DecodingOptions`): chunks of
    ``options.decoding_chunk_size`` encoder frames (> 0) with
    ``options.num_decoding_left_chunks`` left chunks, ``beam_size``, ``ctc_weight`` /
    ``reverse_weight`` for the rescoring, and for a transducer mode (``options.modes[0]``)
    the transducer weights; its other fields do not apply (the prefix search skips no blank
    frames, as WeNet's streaming decoder, and sees no penalties).  ``fusion``: this stream's
    LM and phrases, :func:`asrkit.decode.options.build_fusion` of ``options`` and the model's
    tokenizer (each stream may bias towards its own phrases); required when ``options`` ask
    for an LM or phrases, for a mode that takes them.  ``nbest``: results carry their
    hypotheses (:attr:`Result.nbest`).  ``fbank``
    options: the features' ``sample_rate``, ``num_mel_bins``, ``frame_length`` and
    ``frame_shift`` (the training config's), and ``snip_edges``, ``high_freq``,
    ``sample_scale`` (``fbank_conf``'s, :func:`asrkit.data.features.fbank_options`).
    Not thread-safe; one instance per stream."""

    def __init__(self, model, options: DecodingOptions, *, sample_rate: int = 16000, num_mel_bins: int = 80,
                 frame_length: float = 25.0, frame_shift: float = 10.0, snip_edges: bool = True,
                 high_freq: float = 0.0, sample_scale: float = 32768.0,
                 endpoint_rules: Optional[tuple[EndpointRule, ...]] = DEFAULT_RULES,
                 blank_threshold: float = 0.8, fusion: Optional[Fusion] = None, nbest: bool = False):
        if not options.chunked:
            raise DecodingOptionError(f"streaming needs decoding_chunk_size > 0 (encoder frames per chunk), "
                                      f"got {options.decoding_chunk_size}")
        check_stream_fusion(options, fusion)
        self.fusion = fusion
        self.nbest = nbest
        self.model = model.eval()
        self.searcher = Searcher.of_model(model)
        check_modes(self.searcher, options.modes[:1])
        self.options = options
        encoder = model.encoder
        chunk_size = options.decoding_chunk_size
        self.rate = encoder.embed.rate
        self.window = (chunk_size - 1) * self.rate + encoder.embed.right_context + 1
        self.stride = chunk_size * self.rate
        self.chunk_size = chunk_size
        self.num_left_chunks = options.num_decoding_left_chunks
        self.frame_shift_s = frame_shift / 1000.0
        self.fbank = StreamingFbank(sample_rate, num_mel_bins, frame_length, frame_shift, snip_edges=snip_edges,
                                    high_freq=high_freq, sample_scale=sample_scale)
        self.endpoint = (EndpointDetector(self.rate * self.frame_shift_s, endpoint_rules, blank_threshold)
                         if endpoint_rules else None)
        self.feats = torch.zeros(0, num_mel_bins)  # feature frames not yet consumed by a chunk
        self.frames_consumed = 0                   # feature frames whose stride has passed
        self.start_segment()

    def start_segment(self) -> None:
        """Encoder caches, search and endpoint state of a new segment."""
        self.offset = 0
        self.segment_start_frame = None  # feature frame where the segment's first chunk starts
        self.att_cache = torch.zeros(0, 0, 0, 0)
        self.cnn_cache = torch.zeros(0, 0, 0, 0)
        self.encoder_out: list[torch.Tensor] = []
        self.search = stream_search(self.model, self.searcher, self.options, self.fusion)
        if self.endpoint is not None:
            self.endpoint.reset()

    def accept_waveform(self, samples: torch.Tensor) -> list[Result]:
        """Feed samples (1-D floats in [-1, 1)); returns the results they produced: a
        partial per completed chunk, and a final one at each endpoint."""
        self.add_waveform(samples)
        return self.run_chunks()

    def finish(self) -> list[Result]:
        """End of input: the frames left make a last (shorter) chunk when they give at
        least one encoder frame (its partial result first); the list ends with the
        segment's final result.  The features start over (the frames the end of the audio
        completes, with ``snip_edges`` false, are decoded first)."""
        self.end_input()
        return self.run_chunks() + self.finish_chunks()

    # The steps of accept_waveform and finish, for a caller that runs the encoder of several
    # streams' chunks together (asrkit.stream.stacked_chunks.encode_chunks; asrkit serve's batcher):
    # add_waveform; while next_window() gives a window: encode it (alone: encode), then
    # advance(window, out); at the end end_input, the same loop, then finish_chunks.

    def add_waveform(self, samples: torch.Tensor) -> None:
        """Feed samples: their feature frames join those not yet consumed (no chunk is run)."""
        self._add_frames(self.fbank.accept(samples))

    def end_input(self) -> None:
        """End of input for the features: the frames the end of the audio completes join them."""
        self._add_frames(self.fbank.finish())

    def _add_frames(self, frames: torch.Tensor) -> None:
        if frames.size(0):
            self.feats = torch.cat([self.feats, frames])

    def next_window(self) -> Optional[torch.Tensor]:
        """The feature frames of the next full chunk (``[window, num_mel_bins]``), or ``None``."""
        return self.feats[:self.window] if self.feats.size(0) >= self.window else None

    def run_chunks(self) -> list[Result]:
        """Every full chunk the features hold, each through the encoder alone."""
        results: list[Result] = []
        while (window := self.next_window()) is not None:
            results.extend(self.advance(window, *self.encode(window)))
        return results

    def finish_chunks(self) -> list[Result]:
        """After :meth:`end_input` and the full chunks: the last, shorter chunk (alone) and the
        segment's final result (:meth:`finish`)."""
        results: list[Result] = []
        if self.feats.size(0) >= self.model.encoder.embed.min_input_length:
            results = self.advance(self.feats, *self.encode(self.feats), last=True)
        self.feats = self.feats[:0]
        return results + [self._finalise(0.0)]

    def encoder_input(self, window: torch.Tensor) -> torch.Tensor:
        """A chunk's window of feature frames as the encoder reads it: ``[1, frames, F]`` after CMVN."""
        xs = window.unsqueeze(0)
        return self.model.cmvn(xs) if self.model.cmvn is not None else xs

    @property
    def cache_frames(self) -> int:
        """Attention cache frames kept after a chunk (-1: all, ``num_decoding_left_chunks`` < 0)."""
        return -1 if self.num_left_chunks < 0 else self.chunk_size * self.num_left_chunks

    @torch.inference_mode()
    def encode(self, window: torch.Tensor) -> tuple[torch.Tensor, float]:
        """The encoder on one chunk (``window``: its feature frames) with this stream's caches,
        which it advances.  Returns ``(out [1, T, D], seconds)``."""
        start = time.perf_counter()
        out, att_cache, cnn_cache = self.model.encoder.forward_chunk(
            self.encoder_input(window), self.offset, self.cache_frames, self.att_cache, self.cnn_cache)
        self.set_encoder_state(out.size(1), att_cache, cnn_cache)
        return out, time.perf_counter() - start

    def set_encoder_state(self, frames: int, att_cache: torch.Tensor, cnn_cache: torch.Tensor) -> None:
        """After a chunk of ``frames`` encoder frames: the caches the next chunk reads
        (:meth:`BaseEncoder.forward_chunk`'s layout)."""
        self.offset += frames
        self.att_cache, self.cnn_cache = att_cache, cnn_cache

    @torch.inference_mode()
    def advance(self, window: torch.Tensor, out: torch.Tensor, encoder_s: float = 0.0,
                last: bool = False) -> list[Result]:
        """The rest of a chunk whose encoder frames ``out [1, T, D]`` :meth:`encode` (or a
        batch) gave: the search, the endpoint (not on the ``last`` chunk), and the features
        move on by a chunk (all of them after the ``last``).  ``encoder_s`` counts in the
        partial result's ``compute_s``."""
        start = time.perf_counter()
        if self.segment_start_frame is None:
            self.segment_start_frame = self.frames_consumed
        self.encoder_out.append(out)
        partial, blank_probs = self.search.feed(out)
        audio_s = (self.frames_consumed + window.size(0)) * self.frame_shift_s
        consumed = window.size(0) if last else self.stride
        self.feats = self.feats[consumed:]
        self.frames_consumed += consumed
        results = [Result(partial, False, audio_s, encoder_s + time.perf_counter() - start,
                          nbest=getattr(self.search, "partial_nbest", [partial]) if self.nbest else None,
                          encoder_s=encoder_s)]
        if self.endpoint is not None and not last:
            self.endpoint.accept(blank_probs)
            if self.endpoint.detected():
                results.append(self._finalise(audio_s))
        return results

    @torch.inference_mode()
    def _finalise(self, audio_s: float) -> Result:
        start = time.perf_counter()
        encoder_out = torch.cat(self.encoder_out, dim=1) if self.encoder_out else None
        if self.nbest and hasattr(self.search, "final_nbest"):
            nbest = self.search.final_nbest(encoder_out)
            tokens = nbest[0]
        else:
            tokens = self.search.final(encoder_out)
            nbest = [tokens] if self.nbest else None
        result = Result(tokens, True, audio_s or self.frames_consumed * self.frame_shift_s,
                        time.perf_counter() - start, encoder_out,
                        (self.segment_start_frame or 0) * self.frame_shift_s, nbest)
        self.start_segment()
        return result
