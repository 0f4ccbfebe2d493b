"""Incremental fbank equals the whole-utterance fbank, however the audio is cut (real speech:
a WeNet reference wav)."""
from __future__ import annotations

from pathlib import Path

import pytest
import soundfile
import torch

from asrkit.data.features import compute_fbank
from asrkit.stream.features import StreamingFbank

WAV = Path(__file__).resolve().parents[1] / "fixtures" / "wenet" / "wavs" / "Mike-test-00002.wav"


@pytest.fixture(scope="module")
def speech():
    samples, sr = soundfile.read(WAV, dtype="float32")
    return torch.from_numpy(samples), sr


@pytest.mark.parametrize("piece_s", [0.1, 0.0137, 0.5, 0.021])
def test_pieces_of_any_size_give_the_whole_utterance_fbank(speech, piece_s):
    samples, sr = speech
    whole = compute_fbank(samples.unsqueeze(0), sr, num_mel_bins=80, frame_length=25, frame_shift=10)
    stream = StreamingFbank(sr, 80)
    step = int(piece_s * sr)
    parts = [stream.accept(samples[i:i + step]) for i in range(0, samples.numel(), step)]
    got = torch.cat(parts)
    assert got.shape == whole.shape
    assert (got - whole).abs().max() < 1e-5
    assert stream.frames_done == whole.size(0) and stream.pending.numel() < stream.window


def test_reset_starts_a_new_segment(speech):
    samples, sr = speech
    stream = StreamingFbank(sr, 80)
    stream.accept(samples[:1234])
    stream.reset()
    got = stream.accept(samples[:8000])
    want = compute_fbank(samples[:8000].unsqueeze(0), sr, num_mel_bins=80, frame_length=25, frame_shift=10)
    assert torch.equal(got, want)
