"""Endpoint detection for continuous input: when to finalise a segment and start a new one.

Silence is what the model says it is: an encoder frame is silent when its CTC blank
probability exceeds ``blank_threshold`` (WeNet's runtime and sherpa use the same cue).
Each :class:`EndpointRule` fires when all of its conditions hold for the current
segment (Kaldi's and WeNet's endpointing rules):

* ``must_contain_speech``: some non-silent frame was seen in the segment;
* trailing silence ≥ ``min_trailing_silence_s`` (silent frames since the last non-silent
  one, or since the start when there was none);
* segment length ≥ ``min_utterance_s``.

An endpoint is detected when any rule fires.  :data:`DEFAULT_RULES` are WeNet's: 5 s of
silence without speech, 1 s of silence after speech, or 20 s of segment whatever it holds.
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class EndpointRule:
    must_contain_speech: bool
    min_trailing_silence_s: float
    min_utterance_s: float

    def fires(self, speech_seen: bool, trailing_silence_s: float, utterance_s: float) -> bool:
        return ((speech_seen or not self.must_contain_speech)
                and trailing_silence_s >= self.min_trailing_silence_s
                and utterance_s >= self.min_utterance_s)


DEFAULT_RULES = (
    EndpointRule(must_contain_speech=False, min_trailing_silence_s=5.0, min_utterance_s=0.0),
    EndpointRule(must_contain_speech=True, min_trailing_silence_s=1.0, min_utterance_s=0.0),
    EndpointRule(must_contain_speech=False, min_trailing_silence_s=0.0, min_utterance_s=20.0),
)


class EndpointDetector:
    """Tracks one segment's encoder frames (each ``frame_s`` seconds of audio: the feature
    shift times the subsampling rate) and says when a rule fires."""

    def __init__(self, frame_s: float, rules: tuple[EndpointRule, ...] = DEFAULT_RULES,
                 blank_threshold: float = 0.8):
        if frame_s <= 0:
            raise ValueError(f"frame_s must be > 0, got {frame_s}")
        self.frame_s = frame_s
        self.rules = tuple(rules)
        self.blank_threshold = blank_threshold
        self.reset()

    def reset(self) -> None:
        """A new segment starts."""
        self.frames = 0
        self.trailing_silent = 0
        self.speech_seen = False

    def accept(self, blank_probs: torch.Tensor) -> None:
        """Count the encoder frames of one chunk: ``blank_probs [T]`` = P(blank) per frame."""
        for silent in (blank_probs > self.blank_threshold).tolist():
            self.frames += 1
            if silent:
                self.trailing_silent += 1
            else:
                self.trailing_silent = 0
                self.speech_seen = True

    def detected(self) -> bool:
        return any(rule.fires(self.speech_seen, self.trailing_silent * self.frame_s, self.frames * self.frame_s)
                   for rule in self.rules)
