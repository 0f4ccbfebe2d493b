"""Where audio is cut into the parts that are decoded one by one.

With the voice-activity detector (the default, :mod:`asrkit.transcribe.vad`) the parts are
the speech regions: audio is cut wherever speech pauses for ``min_pause_s`` or more, a
part longer than ``max_segment_s`` is split at its longest inner pause, and audio without
speech -- digital silence, noise, tones -- gives no part at all, so nothing is decoded and
the transcript is empty.  Decoding each stretch of speech between pauses alone keeps
what a model trained on utterances of a few seconds can do: a model never sees more than
it was trained on, words do not merge across a pause, and time and memory grow with the
length of the file only through the audio itself.

Without it (``vad=False``) the audio is decoded whole, in consecutive pieces of
``max_segment_s`` when it is longer (such cuts may fall inside a word).
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional

import numpy as np

from asrkit.transcribe import vad


class SegmentationError(ValueError):
    """A :class:`Segmentation` setting out of range (one line)."""


@dataclasses.dataclass(frozen=True)
class Segmentation:
    """How audio is cut (see the module docstring).

    * ``vad``: cut at pauses found by the Silero detector; ``False``: decode whole (in
      ``max_segment_s`` pieces when longer);
    * ``min_pause_s``: the shortest pause that cuts (seconds of frames below the speech
      threshold - 0.15); shorter pauses stay inside a part;
    * ``max_segment_s``: the longest part (``None``: no limit); longer speech is split at
      its longest inner pause (>= 98 ms), or at the limit where it has none;
    * ``pad_s``: silence kept on each side of a part (half the pause when two parts are
      closer than ``2 pad_s``), as the utterances a model was trained on start and end in
      silence;
    * ``min_speech_s``: speech shorter than this alone between pauses is dropped (clicks);
    * ``speech_threshold``: P(speech) at which a frame starts speech.

    The defaults were chosen on the digits corpus's dev split (docs/transcribe.md)."""

    vad: bool = True
    min_pause_s: float = 0.15
    max_segment_s: Optional[float] = 20.0
    pad_s: float = 0.3
    min_speech_s: float = 0.05
    speech_threshold: float = 0.35

    def __post_init__(self):
        checks = [(self.min_pause_s > 0, f"min_pause_s must be > 0, got {self.min_pause_s}"),
                  (self.max_segment_s is None or self.max_segment_s >= 1.0,
                   f"max_segment_s must be >= 1 s (or None: no limit), got {self.max_segment_s}"),
                  (self.pad_s >= 0, f"pad_s must be >= 0, got {self.pad_s}"),
                  (self.min_speech_s >= 0, f"min_speech_s must be >= 0, got {self.min_speech_s}"),
                  (0.0 < self.speech_threshold < 1.0,
                   f"speech_threshold must be in (0, 1), got {self.speech_threshold}")]
        for ok, message in checks:
            if not ok:
                raise SegmentationError(message)

    @classmethod
    def whole(cls) -> "Segmentation":
        """No cutting at all: the audio decoded in one piece, silence included (what
        ``recognize`` does with an utterance)."""
        return cls(vad=False, max_segment_s=None)


class Segment(NamedTuple):
    start: int  # first sample
    end: int    # last sample + 1


def fixed_pieces(num_samples: int, rate: int, max_segment_s: Optional[float]) -> list[Segment]:
    """``[0, num_samples)`` in consecutive pieces of ``max_segment_s`` (one piece when it is
    ``None`` or the audio is not longer)."""
    if max_segment_s is None or num_samples <= max_segment_s * rate:
        return [Segment(0, num_samples)]
    step = int(max_segment_s * rate)
    return [Segment(s, min(num_samples, s + step)) for s in range(0, num_samples, step)]


def speech_regions_16k(samples_16k: np.ndarray, segmentation: Segmentation,
                       probs: Optional[np.ndarray] = None) -> list[tuple[int, int]]:
    """The speech regions of ``samples_16k`` (:func:`asrkit.transcribe.vad.speech_regions`
    with ``segmentation``'s settings), in samples at 16 kHz; ``probs``: the detector's
    :func:`~asrkit.transcribe.vad.speech_probabilities` of them when already computed."""
    probs = vad.speech_probabilities(samples_16k) if probs is None else probs
    return vad.speech_regions(probs, samples_16k.size, threshold=segmentation.speech_threshold,
                              min_pause_s=segmentation.min_pause_s, min_speech_s=segmentation.min_speech_s,
                              pad_s=segmentation.pad_s, max_speech_s=segmentation.max_segment_s)


def speech_segments(samples_16k: np.ndarray, rate: int, num_samples: int,
                    segmentation: Segmentation) -> list[Segment]:
    """The parts of audio of ``num_samples`` samples at ``rate`` Hz whose 16 kHz version is
    ``samples_16k``: its speech regions (:func:`speech_regions_16k`), in samples at ``rate``
    (every region gives a part: it is at least a sample long at either rate)."""
    regions = speech_regions_16k(samples_16k, segmentation)
    scale = rate / vad.VAD_RATE
    out = []
    for start, end in regions:
        s, e = int(math.floor(start * scale)), min(num_samples, int(math.ceil(end * scale)))
        if e > s:
            out.append(Segment(s, e))
    return out
