"""Filterbank and CMVN against a plain numpy reference of Kaldi's fbank."""
import json

import numpy as np
import pytest
import soundfile
import torch

from asrkit.data.features import CmvnStats, apply_cmvn, compute_fbank, load_cmvn, num_frames, write_cmvn
from tests.data.audio_helpers import SR, tone, write_list
from tests.helpers import run_tool


def mel(f):
    return 1127.0 * np.log(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def mel_centers(num_bins, sr=SR, low=20.0):
    lo, hi = mel(low), mel(sr / 2)
    delta = (hi - lo) / (num_bins + 1)
    return lo + delta * np.arange(1, num_bins + 1)


def reference_fbank(samples, sr=SR, num_bins=80, frame_ms=25.0, shift_ms=10.0):
    """Kaldi fbank in float64 numpy: framing (snip edges), DC removal, pre-emphasis 0.97,
    povey window, zero-pad to a power of two, |FFT|^2, triangular mel filters
    (20 Hz .. Nyquist), natural log floored at float32 epsilon."""
    x = np.asarray(samples, dtype=np.float64) * 32768.0
    win, shift = int(sr * frame_ms / 1000), int(sr * shift_ms / 1000)
    n = 1 + (len(x) - win) // shift
    frames = np.stack([x[i * shift:i * shift + win] for i in range(n)])
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = np.concatenate([frames[:, :1] * (1 - 0.97), frames[:, 1:] - 0.97 * frames[:, :-1]], axis=1)
    frames = frames * (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / (win - 1))) ** 0.85
    nfft = 1 << (win - 1).bit_length()
    power = np.abs(np.fft.rfft(frames, n=nfft)) ** 2
    bin_mel = mel(np.arange(nfft // 2) * sr / nfft)
    centers = mel_centers(num_bins, sr)
    delta = centers[1] - centers[0]
    weights = np.zeros((num_bins, nfft // 2 + 1))
    for b, c in enumerate(centers):
        up = (bin_mel - (c - delta)) / delta
        down = ((c + delta) - bin_mel) / delta
        weights[b, :nfft // 2] = np.maximum(0.0, np.minimum(up, down))
    return np.log(np.maximum(power @ weights.T, np.finfo(np.float32).eps))


def fbank_of(samples, **kw):
    wav = torch.from_numpy(np.asarray(samples, dtype=np.float32)).unsqueeze(0)
    conf = dict(num_mel_bins=80, frame_length=25.0, frame_shift=10.0)
    conf.update(kw)
    return compute_fbank(wav, SR, **conf)


def test_fbank_matches_numpy_reference_on_speech(tiny_corpus):
    for row in tiny_corpus.splits["dev"].data_list.read_text().splitlines()[:3]:
        samples, sr = soundfile.read(json.loads(row)["wav"], dtype="float32")
        ours = fbank_of(samples).numpy()
        ref = reference_fbank(samples)
        assert ours.shape == ref.shape == (num_frames(len(samples), SR, 25.0, 10.0), 80)
        np.testing.assert_allclose(ours, ref, atol=1e-3, rtol=0)


def test_fbank_other_geometry_matches_reference():
    samples = tone(0.5, 300.0)
    ours = fbank_of(samples, num_mel_bins=40, frame_length=32.0, frame_shift=16.0).numpy()
    np.testing.assert_allclose(ours, reference_fbank(samples, num_bins=40, frame_ms=32.0, shift_ms=16.0),
                               atol=1e-3, rtol=0)


@pytest.mark.parametrize("freq", [440.0, 1000.0, 3000.0])
def test_pure_tone_peaks_in_expected_mel_bin(freq):
    feat = fbank_of(tone(0.5, freq))
    expected = int(np.argmin(np.abs(mel_centers(80) - mel(freq))))
    assert int(feat.mean(0).argmax()) == expected


def test_dither_is_reproducible_from_the_generator():
    samples = tone(0.3)
    g = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    a, b = fbank_of(samples, dither=1.0, generator=g()), fbank_of(samples, dither=1.0, generator=g())
    assert torch.equal(a, b) and not torch.equal(a, fbank_of(samples))
    with pytest.raises(ValueError, match="generator"):
        fbank_of(samples, dither=1.0)
    assert fbank_of(np.zeros(100, np.float32)).shape == (0, 80)  # shorter than one window


def test_cmvn_tool_matches_numpy_reference(tmp_path, tiny_corpus):
    rows = [json.loads(r) for r in tiny_corpus.splits["dev"].data_list.read_text().splitlines()[:6]]
    write_list(tmp_path / "sub.list", rows)
    run_tool("compute_cmvn_stats.py", "--data_list", tmp_path / "sub.list", "--out_cmvn", tmp_path / "cmvn.json",
             "--num_workers", 2)
    feats = np.concatenate([reference_fbank(soundfile.read(r["wav"], dtype="float32")[0]) for r in rows])
    stats = json.loads((tmp_path / "cmvn.json").read_text())
    assert stats["frame_num"] == feats.shape[0]
    np.testing.assert_allclose(stats["mean_stat"], feats.sum(0), rtol=1e-5)
    np.testing.assert_allclose(stats["var_stat"], (feats ** 2).sum(0), rtol=1e-5)
    mean, istd = load_cmvn(tmp_path / "cmvn.json")
    np.testing.assert_allclose(mean.numpy(), feats.mean(0), atol=1e-3)
    np.testing.assert_allclose(istd.numpy(), 1 / feats.std(0), atol=1e-3)
    normed = apply_cmvn(torch.from_numpy(feats).float(), mean, istd).numpy()
    np.testing.assert_allclose(normed.mean(0), 0, atol=1e-3)
    np.testing.assert_allclose(normed.std(0), 1, atol=1e-3)


def test_cmvn_stats_io_and_errors(tmp_path):
    stats = CmvnStats(2)
    stats.add(torch.tensor([[1.0, 5.0], [3.0, 5.0]]))
    write_cmvn(tmp_path / "c.json", stats)
    mean, istd = load_cmvn(tmp_path / "c.json")
    assert mean.tolist() == [2.0, 5.0]
    assert istd[0].item() == pytest.approx(1.0) and istd[1].item() == pytest.approx(1e10)  # var floored
    with pytest.raises(ValueError, match="empty"):
        write_cmvn(tmp_path / "e.json", CmvnStats(2))
    (tmp_path / "bad.json").write_text('{"mean_stat": [1], "frame_num": 3}')
    with pytest.raises(ValueError, match="bad.json"):
        load_cmvn(tmp_path / "bad.json")
