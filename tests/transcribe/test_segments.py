"""Where long audio is cut (``asrkit.transcribe.segments`` with the Silero detector of
``asrkit.transcribe.vad``), on real speech synthesized by espeak-ng:

* words synthesized alone and joined with 0.2-0.5 s pauses: every word lies whole inside
  one part, every pause of 0.4 s or more is a cut (no cut inside a word it was given whole);
* silence, noise and tones alone give no part, so nothing is decoded and the text is empty
  (the models themselves do emit tokens on them when made to decode them);
* parts never exceed ``max_segment_s``; without the detector the audio is cut in fixed
  pieces; the settings are checked; importing the detector keeps torch's thread count."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from asrkit.transcribe import Segmentation, SegmentationError, load_model
from asrkit.transcribe.segments import Segment, fixed_pieces, speech_segments
from asrkit.transcribe import vad
from tests.models.wenet_reference import FIXTURES
from tools import synthesize_corpus as synth

RATE = 16000


def words_with_pauses(count: int, pause_s: tuple[float, float], seed: int) -> list[dict]:
    """``count`` utterances of 4-7 digit words of the test-split voices, each word
    synthesized alone (its span known to the sample), with pauses uniform in ``pause_s``."""
    rng = np.random.default_rng([2026, seed])
    voices = synth.default_test_voices()
    return [synth.words_with_pauses(rng, voices, word_count=(4, 8), pause_s=pause_s, final_pause_s=0.4)
            for _ in range(count)]


@pytest.fixture(scope="module")
def words_with_short_pauses():
    return words_with_pauses(8, (0.2, 0.5), seed=11)


def cut_words(utt: dict, parts: list[Segment]) -> list[str]:
    """The words of ``utt`` not inside exactly one part (cut, or not in any)."""
    spans = [(int(a * RATE), int(b * RATE)) for a, b in utt["spans"]]
    return [w for w, (start, end) in zip(utt["words"], spans)
            if sum(p.start <= start and end <= p.end for p in parts) != 1]


def test_no_word_is_cut_and_pauses_of_0_4_s_always_are(words_with_short_pauses):
    for utt in words_with_short_pauses + words_with_pauses(6, (0.4, 0.6), seed=12):
        audio = utt["samples"]
        parts = speech_segments(audio, RATE, audio.size, Segmentation())
        assert cut_words(utt, parts) == [], (utt["voice"], utt["words"], parts)
        assert all(a.end <= b.start for a, b in zip(parts, parts[1:]))
        spans = utt["spans"]
        for (_, end), (start, _) in zip(spans, spans[1:]):
            if start - end >= 0.4:  # a cut in every pause of 0.4 s or more (most of 0.2-0.3 s: docs/transcribe.md)
                assert any(end * RATE <= p.end <= start * RATE for p in parts[:-1]), (utt["words"], spans, parts)


def test_silence_noise_and_tones_give_no_part_and_empty_text():
    rng = np.random.default_rng(3)
    t = np.arange(4 * RATE) / RATE
    full_scale_sine_rms = 1 / np.sqrt(2)
    shapes = {"silence": np.zeros(t.size), "white noise": rng.normal(0, 1, t.size),
              "tone": np.sin(2 * np.pi * 440 * t), "chord": sum(np.sin(2 * np.pi * f * t) for f in (261.63, 329.63, 392.0))}
    files = {}
    for level in (-30, -20, -10):
        for name, x in shapes.items():
            scale = 0.0 if name == "silence" else 10 ** (level / 20) * full_scale_sine_rms / np.sqrt(np.mean(x ** 2))
            files[f"{name} {level} dBFS"] = (x * scale).astype(np.float32)
    for name, audio in files.items():
        assert speech_segments(audio, RATE, audio.size, Segmentation()) == [], name
    for model in (load_model(FIXTURES / "offline"), load_model(FIXTURES / "u2pp")):
        for name, audio in files.items():
            result = model.transcribe(audio, RATE)
            assert result.text == "" and result.segments == [] and result.tokens == [], name
        # what the detector prevents: made to decode the noise, the model emits tokens
        assert model.transcribe(files["white noise -10 dBFS"], RATE, segmentation=Segmentation.whole()).tokens


def test_no_part_is_longer_than_max_segment_s(words_with_short_pauses):
    audio = np.concatenate([u["samples"] for u in words_with_short_pauses])
    for longest in (1.0, 2.0):
        # pauses shorter than 2 s never cut here, so only the length limit splits the speech
        parts = speech_segments(audio, RATE, audio.size, Segmentation(min_pause_s=2.0, max_segment_s=longest))
        assert len(parts) > 1 and max(p.end - p.start for p in parts) <= longest * RATE


def test_without_the_detector_the_audio_is_cut_in_fixed_pieces():
    assert fixed_pieces(100, 10, None) == [Segment(0, 100)]
    assert fixed_pieces(100, 10, 10.0) == [Segment(0, 100)]
    assert fixed_pieces(250, 10, 10.0) == [Segment(0, 100), Segment(100, 200), Segment(200, 250)]
    model = load_model(FIXTURES / "u2pp")
    audio = np.random.default_rng(0).normal(0, 0.01, int(2.5 * RATE)).astype(np.float32)
    result = model.transcribe(audio, RATE, segmentation=Segmentation(vad=False, max_segment_s=1.0))
    assert [(round(a, 3), round(b, 3)) for a, b in result.segments] == [(0.0, 1.0), (1.0, 2.0), (2.0, 2.5)]


@pytest.mark.parametrize("field, value, message", [
    ("min_pause_s", 0.0, "min_pause_s must be > 0"), ("max_segment_s", 0.5, "max_segment_s must be >= 1 s"),
    ("pad_s", -0.1, "pad_s must be >= 0"), ("speech_threshold", 1.0, "speech_threshold must be in"),
    ("min_speech_s", -1.0, "min_speech_s must be >= 0")])
def test_settings_out_of_range_are_one_line_errors(field, value, message):
    with pytest.raises(SegmentationError, match=message):
        Segmentation(**{field: value})


def test_the_detector_keeps_torchs_thread_count():
    """silero_vad's import sets torch's threads to 1; the caller's count must survive it."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        vad._silero()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert vad.speech_probabilities(np.zeros(0, np.float32)).shape == (0,)
    assert vad.speech_probabilities(np.zeros(513, np.float32)).shape == (2,)
