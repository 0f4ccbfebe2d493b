"""``dataset_conf.feats_type: log_mel_spectrogram``: the sample chain's feature step is
Whisper's log-mel of the waveform (asrkit.data.whisper_features) with ``padding`` appended,
its dimension ``log_mel_spectrogram_conf.num_mel_bins``; ``fbank`` stays the default."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import TrainConfig
from asrkit.data.feature_steps import feature_step
from asrkit.data.whisper_features import log_mel_spectrogram
from asrkit.schema import ConfigError, build

pytest.importorskip("whisper")


def conf(**dataset_conf):
    return build(TrainConfig, {"dataset_conf": dataset_conf}, "test").dataset_conf


@pytest.mark.parametrize("padding, bins", [(0, 80), (480, 128)])
def test_feature_step_is_whispers_log_mel(padding, bins):
    dc = conf(feats_type="log_mel_spectrogram", log_mel_spectrogram_conf={"num_mel_bins": bins, "padding": padding})
    assert dc.feat_dim == bins
    wav = 0.1 * torch.randn(1, 8000, generator=torch.Generator().manual_seed(0))
    sample = feature_step(dc, train=True)({"key": "u", "wav": wav, "sample_rate": 16000}, None)
    assert sample["feat"].shape == ((8000 + padding) // 160, bins)
    torch.testing.assert_close(sample["feat"], log_mel_spectrogram(wav[0], bins, padding=padding), atol=0, rtol=0)
    if padding == 0:  # no 30 s padding: the frames of the audio alone (WeNet's padding: 0)
        assert sample["feat"].shape[0] == 50


def test_fbank_is_the_default():
    dc = conf()
    assert dc.feats_type == "fbank" and dc.feat_dim == 80
    sample = feature_step(dc, train=False)({"key": "u", "wav": torch.zeros(1, 8000) + 0.01,
                                            "sample_rate": 16000}, None)
    assert sample["feat"].shape == (48, 80)


def test_log_mel_needs_16_khz():
    with pytest.raises(ConfigError, match="16 kHz"):
        conf(feats_type="log_mel_spectrogram", resample_conf={"resample_rate": 8000})
