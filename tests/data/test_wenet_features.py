"""asrkit's features equal WeNet's: the fbank WeNet computed for the reference wavs
(``wenet.dataset.processor.compute_fbank``, dither 0) and the CMVN buffers of a model WeNet
trained (``encoder.global_cmvn.mean/istd`` of its ``epoch_5.pt``), both extracted from
``/work/shared/wenet_reference/offline`` into ``tests/fixtures/wenet/offline``
(``reference_feats.pt``: wav name -> feats; ``cmvn_buffers.pt``: mean, istd)."""
from __future__ import annotations

import dataclasses

import torch

from asrkit.config import load_config
from asrkit.data.audio import load_audio
from asrkit.data.features import compute_fbank, load_cmvn
from asrkit.data.lists import ListEntry
from asrkit.models.registry import build_cmvn
from tests.helpers import REPO

WENET = REPO / "tests" / "fixtures" / "wenet"


def wenet_offline_config():
    """WeNet's saved train.yaml, its CMVN file found next to it."""
    cfg = load_config(WENET / "offline" / "train.yaml")
    return dataclasses.replace(cfg, cmvn_conf=dataclasses.replace(
        cfg.cmvn_conf, cmvn_file=str(WENET / "offline" / cfg.cmvn_conf.cmvn_file)))


def assert_fbank_close(ours: torch.Tensor, want: torch.Tensor, msg: str) -> None:
    """Log-mel features equal to float32's rounding on any CPU: each mel energy within 1e-4 of
    itself plus 1e-7 of its frame's largest (the FFT rounds relative to the frame's energy, so a
    bin 60 dB down moves by ~1e-3 in the log between AVX2, AVX-512 and other FFT kernels; a
    wrong window, filter or floor moves energies by far more)."""
    assert ours.shape == want.shape, msg
    e_ours, e_want = ours.double().exp(), want.double().exp()
    allowed = 1e-4 * e_want + 1e-7 * e_want.amax(dim=1, keepdim=True)
    excess = float(((e_ours - e_want).abs() - allowed).max())
    assert excess <= 0, f"{msg}: mel energies differ beyond float32 rounding by {excess:.3g}"


def test_fbank_equals_wenet_reference():
    reference = torch.load(WENET / "offline" / "reference_feats.pt", weights_only=True)
    fb = wenet_offline_config().dataset_conf.fbank_conf
    assert len(reference) == 3
    for name, feats in reference.items():
        wav, sr = load_audio(ListEntry(key=name, txt="", duration=0.0, wav=str(WENET / "wavs" / name)))
        ours = compute_fbank(wav, sr, num_mel_bins=fb.num_mel_bins, frame_length=fb.frame_length,
                             frame_shift=fb.frame_shift, dither=0.0)
        assert_fbank_close(ours, feats, name)


def test_cmvn_equals_wenet_model_buffers():
    buffers = torch.load(WENET / "offline" / "cmvn_buffers.pt", weights_only=True)
    cfg = wenet_offline_config()
    mean, istd = load_cmvn(cfg.cmvn_conf.cmvn_file, 80)
    layer = build_cmvn(cfg, 80, load_stats=True)  # the model layer a WeNet config builds
    for got_mean, got_istd in ((mean, istd), (layer.mean, layer.istd)):
        torch.testing.assert_close(got_mean, buffers["mean"], atol=1e-6, rtol=0)
        torch.testing.assert_close(got_istd, buffers["istd"], atol=1e-6, rtol=0)
