"""Long audio: cut it at endpoints into parts decoded one by one, so that time and memory
grow linearly with the length.

1. **CTC pass**: the encoder runs over the file's features window by window
   (``window_s`` of features plus ``context_s`` on each side, whose outputs are dropped;
   the chunk options of the decoding apply), and the CTC blank probability of every
   encoder frame is kept -- one float per 40 ms.  Windows rather than the chunk-by-chunk
   streaming encoder because a full-context model (and an exported archive) has no
   streaming mode; for a streaming model the windowed pass gives the blank probabilities
   with more context than chunks would.
2. **Endpoints**: the frames are fed one by one to
   :class:`asrkit.stream.endpoint.EndpointDetector` -- the streaming recognizer's rules
   (default: 5 s of silence, 1 s of silence after speech, 20 s of segment; a frame is
   silent when P(blank) > ``blank_threshold``); where a rule fires, a segment ends and the
   detector starts over.
3. Each segment with speech is decoded alone (features sliced from the file's, which
   equal the segment's own: Kaldi framing reads only a frame's samples); token times are
   offset by the segment's start.  Segments without speech are skipped.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from asrkit.decode.options import DecodingOptions
from asrkit.stream.endpoint import DEFAULT_RULES, EndpointDetector, EndpointRule


DEFAULT_PAUSE_S = 0.25  # seconds of silence after speech at which chunk-trained models' audio is cut


@dataclasses.dataclass(frozen=True)
class Segmentation:
    """When and how audio is cut (see the module docstring).  ``threshold_s``: audio up to
    this long is decoded whole."""

    threshold_s: float = 30.0
    rules: tuple[EndpointRule, ...] = DEFAULT_RULES
    blank_threshold: float = 0.8
    window_s: float = 20.0
    context_s: float = 1.0

    @classmethod
    def for_model(cls, chunk_trained: bool, has_ctc: bool, threshold_s: float = 30.0) -> "Segmentation":
        """``transcribe``'s default for a model.  Trained with chunks (U2/U2++: dynamic or
        static chunks) and with a CTC head: cut at :data:`DEFAULT_PAUSE_S` pauses
        (:meth:`at_pauses`) -- such a model's CTC spikes stay near their sound, so its runs of
        blank frames are pauses, and decoding between pauses keeps word boundaries and word
        times that models trained on connected speech lose across pauses.  Otherwise
        (full context, or no CTC head) audio up to ``threshold_s`` is decoded whole: a
        full-context model may put its spikes far from their sound (docs/transcribe.md),
        so its blank runs are not pauses and cutting there loses words."""
        if chunk_trained and has_ctc:
            return cls.at_pauses(DEFAULT_PAUSE_S)
        return cls(threshold_s=threshold_s)

    @classmethod
    def at_pauses(cls, pause_s: float, **kwargs) -> "Segmentation":
        """Cut audio of any length wherever ``pause_s`` of silence follows speech (the
        default rules too): for models that lose words or word boundaries across pauses
        inside an utterance (trained on connected speech).  ``kwargs``: the other fields."""
        pause = EndpointRule(must_contain_speech=True, min_trailing_silence_s=pause_s, min_utterance_s=0.0)
        return cls(threshold_s=0.0, rules=(pause, *DEFAULT_RULES), **kwargs)


class Segment(NamedTuple):
    start: int  # first encoder frame
    end: int    # last encoder frame + 1
    speech: bool


def _multiple(seconds: float, frame_shift_ms: float, rate: int) -> int:
    """``seconds`` in feature frames, rounded up to a multiple of ``rate`` (at least one)."""
    frames = int(round(seconds * 1000.0 / frame_shift_ms))
    return max(rate, -(-frames // rate) * rate)


@torch.inference_mode()
def blank_probabilities(backend, feats: torch.Tensor, options: DecodingOptions, window_s: float,
                        context_s: float, device: str = "cpu") -> torch.Tensor:
    """P(blank) per encoder frame of ``feats [T, F]`` (normalised features), ``[T']``,
    from the CTC pass of the module docstring (the encoder context of ``options``; no
    ``blank_penalty``)."""
    rate, shift = backend.subsampling, backend.frame_shift
    window = _multiple(window_s, shift, rate)
    context = max(_multiple(context_s, shift, rate), -(-backend.min_input_length // rate) * rate)
    total = feats.size(0)
    out_frames = (total - backend.right_context - 1) // rate + 1
    pieces = []
    for core in range(0, out_frames * rate, window):
        first = max(0, core - context)
        last = min(total, core + window + context)
        x = feats[first:last].unsqueeze(0).to(device)
        enc, lengths = backend.encode(x, torch.tensor([x.size(1)], device=device), options)
        log_probs = backend.searcher.ctc_log_probs(enc, 0.0)[0, :int(lengths[0])]
        skip = (core - first) // rate
        pieces.append(log_probs[skip: skip + window // rate, backend.blank].exp().cpu())
    probs = torch.cat(pieces)
    assert probs.numel() == out_frames, (probs.numel(), out_frames)
    return probs


def endpoint_segments(blank_probs: torch.Tensor, frame_s: float, rules: tuple[EndpointRule, ...],
                      blank_threshold: float) -> list[Segment]:
    """The segments the endpoint rules cut ``blank_probs [T']`` into (covering every frame)."""
    detector = EndpointDetector(frame_s, rules, blank_threshold)
    segments: list[Segment] = []
    start = 0
    for t in range(blank_probs.numel()):
        detector.accept(blank_probs[t:t + 1])
        if detector.detected():
            segments.append(Segment(start, t + 1, detector.speech_seen))
            detector.reset()
            start = t + 1
    if start < blank_probs.numel():
        segments.append(Segment(start, blank_probs.numel(), detector.speech_seen))
    return segments


def segment_features(feats: torch.Tensor, segment: Segment, rate: int, right_context: int) -> torch.Tensor:
    """The feature frames whose encoding gives exactly the encoder frames of ``segment``
    (frame ``j`` reads input frames ``j·rate .. j·rate + right_context``)."""
    first = segment.start * rate
    last = min(feats.size(0), (segment.end - 1) * rate + right_context + 1)
    return feats[first:last]
