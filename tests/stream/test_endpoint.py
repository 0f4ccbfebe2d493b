"""Endpoint rules on CTC blank probabilities (WeNet's defaults: 5 s of silence, 1 s of
silence after speech, 20 s of segment)."""
from __future__ import annotations

import torch

from asrkit.stream.endpoint import EndpointDetector

FRAME_S = 0.04  # 10 ms features, 4x subsampling


def frames(silent: int = 0, speech: int = 0) -> torch.Tensor:
    return torch.cat([torch.full((silent,), 0.99), torch.full((speech,), 0.1)])


def feed_until_endpoint(detector: EndpointDetector, probs: torch.Tensor, chunk: int = 16) -> float:
    """Seconds of audio when the endpoint is first detected (chunk by chunk), or -1."""
    for start in range(0, probs.numel(), chunk):
        detector.accept(probs[start:start + chunk])
        if detector.detected():
            return detector.frames * FRAME_S
    return -1.0


def test_one_second_of_silence_after_speech_ends_the_segment():
    d = EndpointDetector(FRAME_S)
    at = feed_until_endpoint(d, torch.cat([frames(silent=10, speech=30), frames(silent=100)]), chunk=1)
    assert at == (10 + 30 + 25) * FRAME_S  # 25 frames = 1 s after the last speech frame


def test_silence_without_speech_needs_five_seconds():
    d = EndpointDetector(FRAME_S)
    assert feed_until_endpoint(d, frames(silent=124), chunk=1) == -1.0
    d.reset()
    assert feed_until_endpoint(d, frames(silent=200), chunk=1) == 125 * FRAME_S


def test_twenty_seconds_of_speech_end_a_segment_and_reset_starts_over():
    d = EndpointDetector(FRAME_S)
    speech = frames(speech=600)
    assert feed_until_endpoint(d, speech, chunk=1) == 500 * FRAME_S
    d.reset()
    assert not d.detected() and d.frames == 0 and not d.speech_seen


def test_short_pauses_inside_speech_do_not_end_it():
    d = EndpointDetector(FRAME_S)
    probs = torch.cat([frames(speech=20), frames(silent=20), frames(speech=20), frames(silent=20)])
    assert feed_until_endpoint(d, probs) == -1.0
