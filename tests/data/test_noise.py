"""Additive noise, volume perturbation and the noise/RIR lists (``asrkit.data.noise``,
``asrkit.data.noise_lists``), alone and in the sample chain and the loader."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import ConfigError, build
from asrkit.data.dataset import build_dataloader
from asrkit.data.lists import read_list
from asrkit.data.noise import db_range, mix_at_snr, noise_segment
from asrkit.data.noise_lists import AudioCache, AudioListError, read_audio_list
from asrkit.data.processors import Skip, SkipStats
from tests.data.audio_helpers import SR, config, real_setup, tone, write_wav


def snr_db(speech: torch.Tensor, noise: torch.Tensor) -> float:
    return 10 * math.log10(float(speech.double().pow(2).mean()) / float(noise.double().pow(2).mean()))


@pytest.fixture(scope="module")
def dev(tiny_corpus):
    return read_list(tiny_corpus.splits["dev"].data_list)


@pytest.fixture(scope="module")
def noise_dir(tmp_path_factory, tiny_corpus):
    """Two real noises: brown-ish rumble and a (shorter than most utterances) tone; a list of both."""
    root = tmp_path_factory.mktemp("noises")
    rng = np.random.default_rng(0)
    rumble = np.cumsum(rng.standard_normal(SR * 2)).astype(np.float32)
    rumble = 0.5 * rumble / np.abs(rumble).max()
    write_wav(root / "rumble.wav", rumble)
    write_wav(root / "tone.wav", tone(0.3, 1000.0))
    (root / "noise.scp").write_text("rumble rumble.wav\ntone tone.wav\n")
    return root


def aug(noise_dir, **noise_conf):
    return {"speed_perturb": False, "spec_aug": False, "noise": True,
            "noise_conf": {"noise_scp": str(noise_dir / "noise.scp"), **noise_conf}}


# ----------------------------------------------------------------------------- the arithmetic


@pytest.mark.parametrize("target", [-5.0, 0.0, 7.3, 20.0])
def test_the_mixed_signal_has_the_drawn_snr(dev, target):
    """Real speech and real noise (a recorded utterance, and another utterance as babble):
    the SNR measured on the mixture lies within 0.5 dB of the target."""
    from asrkit.data.audio import load_audio
    speech, _ = load_audio(dev[0])
    babble = load_audio(dev[1])[0][0]
    segment = noise_segment(babble, speech.shape[1], 123)
    mixed = mix_at_snr(speech, segment, target)
    if float(mixed.abs().max()) < 1.0:  # not renormalised: the added noise is the mixture minus the speech
        assert abs(snr_db(speech, mixed - speech) - target) < 0.5
    else:  # renormalised as a whole: speech and noise scaled by the same factor
        k = float((mixed * speech).sum() / speech.pow(2).sum())
        assert abs(snr_db(k * speech, mixed - k * speech) - target) < 0.5
    assert float(mixed.abs().max()) <= 1.0


def test_a_loud_mixture_is_scaled_down_keeping_its_snr():
    speech = torch.from_numpy(tone(0.5, 300.0, amp=0.95)).unsqueeze(0)
    noise = torch.from_numpy(tone(0.5, 2000.0, amp=0.9, seed=3))
    mixed = mix_at_snr(speech, noise, 0.0)
    assert float(mixed.abs().max()) == pytest.approx(1.0)
    k = float((mixed * speech).sum() / speech.pow(2).sum())
    assert abs(snr_db(k * speech, mixed - k * speech)) < 0.5


def test_noise_segment_wraps_around():
    noise = torch.arange(5.0)
    assert noise_segment(noise, 7, 3).tolist() == [3, 4, 0, 1, 2, 3, 4]


def test_db_range_takes_espnet_strings_and_lists():
    assert db_range([3, 10]) == (3.0, 10.0) and db_range("3_10") == (3.0, 10.0) and db_range("13") == (13.0, 13.0)
    with pytest.raises(ValueError):
        db_range([10, 3])


# ----------------------------------------------------------------------------- lists


def test_lists_in_kaldi_musan_and_rirs_noises_layouts(tmp_path):
    """A wav.scp (MUSAN as Kaldi's make_musan writes it), paths one per line, and the
    RIRS_NOISES rir_list whose paths start at the folder holding RIRS_NOISES."""
    rirs = tmp_path / "RIRS_NOISES" / "simulated_rirs" / "smallroom"
    write_wav(rirs / "Room001" / "Room001-00001.wav", tone(0.1))
    (rirs / "rir_list").write_text(
        "--rir-id smallroom-Room001-00001 --room-id smallroom-Room001 "
        "RIRS_NOISES/simulated_rirs/smallroom/Room001/Room001-00001.wav\n")
    items = read_audio_list(rirs / "rir_list")
    assert [(i.id, i.path) for i in items] == [("smallroom-Room001-00001",
                                                str(rirs / "Room001" / "Room001-00001.wav"))]
    (tmp_path / "noise_list").write_text(
        "--noise-id noise-free-sound-0000 --noise-type point-source --bg-fg-type foreground /n/0000.wav\n")
    assert read_audio_list(tmp_path / "noise_list")[0].id == "noise-free-sound-0000"
    (tmp_path / "wav.scp").write_text("# MUSAN\nnoise-free-sound-0001 /musan/noise/a.wav\n\n/musan/noise/b.wav\n"
                                      "n2 /my disk/noise c.wav\n")  # (a wav.scp path runs to the line's end)
    assert [(i.id, i.path) for i in read_audio_list(tmp_path / "wav.scp")] == [
        ("noise-free-sound-0001", "/musan/noise/a.wav"), ("/musan/noise/b.wav", "/musan/noise/b.wav"),
        ("n2", "/my disk/noise c.wav")]


@pytest.mark.parametrize("text, what", [
    ("--rir-id x --room-id\n", "'--option value' pairs"),
    ("sp1 sox a.wav -t wav - |\n", "a command pipe"),
    ("", "the list is empty")])
def test_a_malformed_list_is_refused_in_one_line(tmp_path, text, what):
    (tmp_path / "bad").write_text("ok.wav\n" + text if text else "")
    with pytest.raises(AudioListError) as e:
        read_audio_list(tmp_path / "bad", "dataset_conf.noise_conf.noise_scp")
    message = str(e.value)
    assert what in message and "\n" not in message and message.startswith("dataset_conf.noise_conf.noise_scp")
    assert ("line 2" in message) == bool(text)


def test_the_cache_keeps_recordings_within_its_budget(tmp_path):
    paths = [write_wav(tmp_path / f"{i}.wav", tone(0.1, seed=i)) for i in range(3)]  # 6.4 kB each as float32
    cache = AudioCache([type("I", (), {"path": str(p)})() for p in paths], "unreadable_noise", max_bytes=15000)
    first = cache.get(0, SR)
    assert cache.get(0, SR) is first  # cached
    cache.get(1, SR), cache.get(2, SR)  # evicts 0
    assert cache.get(0, SR) is not first and torch.equal(cache.get(0, SR), first)
    assert cache.get(0, 8000).numel() == first.numel() // 2  # resampled to the rate asked for


# ----------------------------------------------------------------------------- in the chain


def test_config_keys_are_checked_at_load(noise_dir):
    with pytest.raises(ConfigError, match="noise: true needs noise_conf.noise_scp"):
        build(TrainConfig, {"dataset_conf": {"noise": True}})
    with pytest.raises(ConfigError, match="noise_db_range"):
        build(TrainConfig, {"dataset_conf": aug(noise_dir, noise_db_range=[20, 5])})
    with pytest.raises(ConfigError, match="noise_apply_prob"):
        build(TrainConfig, {"dataset_conf": aug(noise_dir, noise_apply_prob=1.5)})
    for value, expected in (("5_20", (5.0, 20.0)), (13, (13.0, 13.0)), ([0, 5], (0.0, 5.0))):
        dc = build(TrainConfig, {"dataset_conf": aug(noise_dir, noise_db_range=value)}).dataset_conf
        assert db_range(dc.noise_conf.noise_db_range) == expected


@pytest.mark.parametrize("distribution", ["uniform", "log_uniform"])
def test_volume_gains_are_uniform_in_their_scale(distribution):
    """``uniform`` (Kaldi's): the gain's mean is the range's middle; ``log_uniform``: the gain in
    decibels is uniform, so as many gains fall below the range's geometric middle as above."""
    from asrkit.data.noise import perturb_volume
    low, high = 0.05, 4.0
    gains = np.array([float(perturb_volume(torch.ones(1, 1), torch.Generator().manual_seed(i), prob=1.0,
                                           scale_low=low, scale_high=high,
                                           log_uniform=distribution == "log_uniform")) for i in range(4000)])
    assert low <= gains.min() and gains.max() <= high
    if distribution == "uniform":
        assert abs(gains.mean() - (low + high) / 2) < 0.05
    else:
        assert abs(np.log(gains).mean() - (math.log(low) + math.log(high)) / 2) < 0.05
        assert abs((gains < math.sqrt(low * high)).mean() - 0.5) < 0.03
    with pytest.raises(ConfigError, match="scale_distribution: must be one of"):
        build(TrainConfig, {"dataset_conf": {"volume_perturb_conf": {"scale_distribution": "loud"}}})


def test_noise_changes_training_audio_only_and_draws_from_its_own_stream(tiny_units, dev, noise_dir):
    _, plain = real_setup(tiny_units, train=True, speed_perturb=False, spec_aug=True)
    _, noisy = real_setup(tiny_units, train=True, **{**aug(noise_dir), "spec_aug": True})
    _, never = real_setup(tiny_units, train=True, **{**aug(noise_dir, noise_apply_prob=0.0), "spec_aug": True})
    _, evaluation = real_setup(tiny_units, train=False, **aug(noise_dir))
    a, b, c = plain(dev[0], 1)["feat"], noisy(dev[0], 1)["feat"], never(dev[0], 1)["feat"]
    assert not torch.equal(a, b)
    assert torch.equal(a, c)  # prob 0: the SpecAugment masks are those of the chain without noise
    assert torch.equal(a == 0, b == 0)  # the same masks with noise on
    _, plain_eval = real_setup(tiny_units, train=False)
    assert torch.equal(evaluation(dev[0], 1)["feat"], plain_eval(dev[0], 1)["feat"])


def test_an_unreadable_noise_file_is_a_counted_logged_skip(tiny_units, dev, tmp_path, caplog):
    (tmp_path / "noise.scp").write_text(f"gone {tmp_path / 'gone.wav'}\n")
    (tmp_path / "broken.wav").write_bytes(b"RIFF not audio at all")
    _, proc = real_setup(tiny_units, train=True, speed_perturb=False, spec_aug=False, noise=True,
                         noise_conf={"noise_scp": str(tmp_path / "noise.scp")})
    out = proc(dev[0], 0)
    assert isinstance(out, Skip) and out.reason == "unreadable_noise" and "gone.wav" in out.detail
    stats = SkipStats()
    with caplog.at_level("WARNING", logger="asrkit.data"):
        stats.add(out)
    assert stats.counts == {"unreadable_noise": 1} and "gone.wav" in caplog.text


def test_draws_are_the_same_in_workers_and_after_a_resume(tiny_units, tiny_corpus, noise_dir, tmp_path):
    """Noise, reverberation and volume on: a loader with 2 workers, and a loader in the
    training process restored after 2 of its batches (a resume in a new process), hand over
    identical batches."""
    write_wav(tmp_path / "rir.wav", np.r_[np.zeros(30), 1.0, 0.5 * np.exp(-np.arange(800) / 150.0)].astype(np.float32))
    (tmp_path / "rir.list").write_text(str(tmp_path / "rir.wav") + "\n")
    keys = {**aug(noise_dir, noise_apply_prob=0.7), "reverb": True,
            "reverb_conf": {"rir_scp": str(tmp_path / "rir.list"), "rir_apply_prob": 0.5},
            "volume_perturb": True, "volume_perturb_conf": {"volume_apply_prob": 0.5},
            "batch_conf": {"batch_type": "static", "batch_size": 4}, "persistent_workers": False}
    entries = read_list(tiny_corpus.splits["dev"].data_list)

    def loader(workers):
        dc, proc = real_setup(tiny_units, train=True, **keys, num_workers=workers)
        built = build_dataloader(entries, dc, proc, train=True, seed=17, rank=0, world_size=1)
        built.set_epoch(3)
        return built

    full = list(loader(2))
    first = loader(0)
    taken = [b for _, b in zip(range(2), first)]
    resumed = loader(0)
    resumed.load_state_dict(first.state_dict())
    again = taken + list(resumed)
    assert len(full) == len(again) == 3
    for got, want in zip(again, full):
        assert got["keys"] == want["keys"] and torch.equal(got["feats"], want["feats"])
    _, proc = real_setup(tiny_units, train=True, **keys)
    _, clean = real_setup(tiny_units, train=True, speed_perturb=False, spec_aug=False)
    changed = [not torch.equal(proc(e, 3)["feat"], clean(e, 3)["feat"]) for e in entries]
    assert 0 < sum(changed) <= len(entries)  # prob 0.7 / 0.5 / 0.5: most, but maybe not all, changed
