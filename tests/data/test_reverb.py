"""Reverberation (``asrkit.data.reverb``): aligned on the direct path, normalised to the
input's power, in the sample chain with lists in RIRS_NOISES' layout."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from asrkit.data.lists import read_list
from asrkit.data.processors import Skip
from asrkit.data.reverb import reverberate
from tests.data.audio_helpers import real_setup, tone, write_wav


@pytest.fixture(scope="module")
def dev(tiny_corpus):
    return read_list(tiny_corpus.splits["dev"].data_list)


@pytest.mark.parametrize("position, gain", [(0, 1.0), (37, 0.25), (4000, -2.0)])
def test_a_single_tap_impulse_response_leaves_the_audio_unchanged(dev, position, gain):
    from asrkit.data.audio import load_audio
    wav, _ = load_audio(dev[0])
    rir = torch.zeros(position + 100)
    rir[position] = gain
    out = reverberate(wav, rir)
    assert out.shape == wav.shape and out.dtype == wav.dtype
    torch.testing.assert_close(out, wav * (1 if gain > 0 else -1), rtol=0, atol=1e-5)


def test_the_direct_path_stays_in_place_and_the_power_is_kept():
    """An RIR with a weak early reflection before a strong direct path and a decaying tail:
    the output starts at the direct path (a click stays where it was) and keeps the input's
    mean power."""
    click = torch.zeros(1, 2000)
    click[0, 500] = 0.5
    rir = torch.zeros(900)
    rir[10], rir[50] = 0.1, 1.0
    rir[51:] = 0.3 * torch.exp(-torch.arange(849.0) / 100)
    out = reverberate(click, rir)
    assert int(out.abs().argmax()) == 500
    assert float(out.pow(2).mean()) == pytest.approx(float(click.pow(2).mean()), rel=1e-5)
    speech = torch.from_numpy(tone(0.5, 220.0)).unsqueeze(0)
    wet = reverberate(speech, rir)
    assert not torch.allclose(wet, speech, atol=1e-2)
    assert float(wet.pow(2).mean()) == pytest.approx(float(speech.pow(2).mean()), rel=1e-4)


def test_reverb_in_the_chain_reads_rirs_noises_lists(tiny_units, dev, tmp_path):
    room = tmp_path / "RIRS_NOISES" / "simulated_rirs" / "smallroom"
    rir = np.r_[np.zeros(20), 1.0, 0.6 * np.exp(-np.arange(3000) / 400.0) * np.cos(np.arange(3000))]
    write_wav(room / "Room001" / "Room001-00001.wav", (0.5 * rir).astype(np.float32))
    (room / "rir_list").write_text("--rir-id smallroom-Room001-00001 --room-id smallroom-Room001 "
                                   "RIRS_NOISES/simulated_rirs/smallroom/Room001/Room001-00001.wav\n")
    keys = {"speed_perturb": False, "spec_aug": False, "reverb": True, "reverb_conf": {"rir_scp": str(room / "rir_list")}}
    _, proc = real_setup(tiny_units, train=True, **keys)
    _, clean = real_setup(tiny_units, train=True, speed_perturb=False, spec_aug=False)
    wet, dry = proc(dev[0], 0), clean(dev[0], 0)
    assert wet["feat"].shape == dry["feat"].shape and not torch.allclose(wet["feat"], dry["feat"], atol=0.5)
    (room / "Room001" / "Room001-00001.wav").write_bytes(b"")
    _, broken = real_setup(tiny_units, train=True, **keys)
    out = broken(dev[0], 0)
    assert isinstance(out, Skip) and out.reason == "unreadable_rir"
