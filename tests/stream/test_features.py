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


# ----------------------------------------------------------------------------- centred frames


@pytest.mark.parametrize("snip_edges", [True, False])
@pytest.mark.parametrize("piece", [1, 7, 219, 1601])
def test_odd_pieces_give_the_whole_utterance_fbank_both_framings(speech, snip_edges, piece):
    """Centred frames (snip_edges false: reflected at both ends, round(T / shift) of them)
    streamed equal the whole-utterance ones too; :meth:`finish` adds the frames only the
    end of the audio completes (none with snip_edges)."""
    samples, sr = speech
    options = dict(snip_edges=snip_edges, high_freq=-400.0)
    for n in (samples.numel() if piece > 7 else 5003, 401, 300, 79):
        part = samples[:n]
        whole = compute_fbank(part.unsqueeze(0), sr, num_mel_bins=80, frame_length=25, frame_shift=10, **options)
        stream = StreamingFbank(sr, 80, **options)
        parts = [stream.accept(part[i:i + piece]) for i in range(0, part.numel(), piece)]
        last = stream.finish()
        assert last.size(0) == (0 if snip_edges else whole.size(0) - sum(p.size(0) for p in parts))
        got = torch.cat(parts + [last])
        assert got.shape == whole.shape, (n, piece)
        assert got.numel() == 0 or (got - whole).abs().max() < 1e-5, (n, piece)
        assert stream.frames_done == 0 and stream.pending.numel() == 0  # (finish starts over)


def test_centred_frames_come_out_as_their_last_sample_arrives_and_the_buffer_stays_small(speech):
    """kaldi-native-fbank's rule before the input ends: frame k (samples k·160 − 120 ..
    k·160 + 279) once sample k·160 + 279 is in; at most a window and a hop buffered."""
    samples, sr = speech
    stream = StreamingFbank(sr, 80, snip_edges=False)
    done = 0
    for end in range(100, 16000, 100):
        done += stream.accept(samples[end - 100:end]).size(0)
        assert done == max(0, (end - 280) // 160 + 1), end
        assert stream.pending.numel() <= stream.window + stream.shift
