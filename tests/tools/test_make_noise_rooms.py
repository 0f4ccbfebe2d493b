"""tools/make_noise_rooms.py, tools/make_noisy_set.py and tools/seed_summary.py: simulated
rooms and noise that the pipeline reads, deterministic; the recipe's hard test kept apart
from training; mean ± sd over seeds."""
from __future__ import annotations

import json
import re
import statistics

import numpy as np
import pytest
import soundfile as sf
import yaml

from asrkit.data.noise_lists import read_audio_list
from tests.helpers import REPO
from tools import make_noise_rooms, make_noisy_set, seed_summary


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("noise_rooms")
    assert make_noise_rooms.main(["--out", str(root / "train"), "--kind", "train", "--rirs", "2", "--noises", "4",
                                  "--noise_seconds", "2", "--jobs", "2"]) == 0
    assert make_noise_rooms.main(["--out", str(root / "test"), "--kind", "test", "--rirs", "1", "--noises", "2",
                                  "--noise_seconds", "2", "--jobs", "2"]) == 0
    return root


def test_lists_the_pipeline_reads_with_every_noise_type(made):
    for kind, rirs, noises in (("train", 2, 4), ("test", 1, 2)):
        assert len(read_audio_list(made / kind / "rir.scp")) == rirs
        items = read_audio_list(made / kind / "noise.scp")
        assert [re.sub(r"\d+$", "", i.id.split("-")[1]) for i in items] == \
            list(make_noise_rooms.KINDS[kind].noise_types)
        for item in items:
            audio, sr = sf.read(item.path)
            assert sr == 16000 and audio.size == 32000 and 0.45 < np.abs(audio).max() <= 0.5
    rir, _ = sf.read(read_audio_list(made / "test" / "rir.scp")[0].path)
    assert np.abs(rir).max() == pytest.approx(0.9, abs=1e-6) and rir.size > 0.3 * 16000  # a long, reverberant room


def test_the_same_seed_makes_the_same_files(made, tmp_path):
    (tmp_path / "rir").mkdir(), (tmp_path / "noise").mkdir()
    for what, index in (("rir", 1), ("noise", 0)):  # a room, and the babble (espeak-ng voices)
        name, path = make_noise_rooms._job((what, str(tmp_path), "train", 1, index, 2.0,
                                            make_noise_rooms.training_voices(1)))
        assert (tmp_path / what / f"{name}.wav").read_bytes() == (made / "train" / what / f"{name}.wav").read_bytes(), \
            (name, np.abs(sf.read(tmp_path / what / f"{name}.wav")[0] - sf.read(made / "train" / what / f"{name}.wav")[0]).max())


def test_the_hard_test_shares_no_setting_with_training():
    """The generator kinds share no RT60, room size or noise type, and the recipe's SNR of the
    hard test lies outside every training config's noise_db_range."""
    train, test = make_noise_rooms.KINDS["train"], make_noise_rooms.KINDS["test"]
    assert train.rt60[1] < test.rt60[0] and not set(train.noise_types) & set(test.noise_types)
    assert train.room[0][1] <= test.room[0][0]
    run_sh = (REPO / "examples/digits/s0/run.sh").read_text()
    low, high = map(float, re.search(r'^noisy_test_snr="(\S+) (\S+)"', run_sh, re.M).groups())
    configs = sorted((REPO / "examples/digits/s0/conf").glob("train_*cpu.yaml"))
    assert "train_conformer_cpu.yaml" in {c.name for c in configs}  # (every digits config, the default among them)
    for config in configs:
        dataset_conf = yaml.safe_load(config.read_text())["dataset_conf"]
        if "noise_conf" not in dataset_conf:  # (the Whisper config: no noise augmentation at all)
            assert not dataset_conf.get("noise", False), config.name
            continue
        train_low, train_high = dataset_conf["noise_conf"]["noise_db_range"]
        assert high < train_low or low > train_high, config.name


def test_noisy_set_is_reverberant_noisy_and_reproducible(made, tiny_corpus, tmp_path, capsys):
    src = tiny_corpus.splits["test"].dir
    args = ["--src", str(src), "--rir_scp", str(made / "test" / "rir.scp"), "--noise_scp",
            str(made / "test" / "noise.scp"), "--snr_range", "2", "5"]
    assert make_noisy_set.main([*args, "--dst", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "text").read_text() == (src / "text").read_text()
    draws = json.loads((tmp_path / "a" / "draws.json").read_text())
    assert len(draws) == 12 and all(2 <= d["snr_db"] <= 5 for d in draws.values())
    for line in (src / "wav.scp").read_text().splitlines()[:3]:
        key, path = line.split()
        clean, _ = sf.read(path)
        noisy, _ = sf.read(tmp_path / "a" / "wav" / f"{key}.wav")
        assert noisy.shape == clean.shape and not np.allclose(noisy, clean, atol=0.01)
    assert make_noisy_set.main([*args, "--dst", str(tmp_path / "a")]) == 0
    assert "already made" in capsys.readouterr().err
    assert make_noisy_set.main([*args, "--dst", str(tmp_path / "b")]) == 0
    for wav in (tmp_path / "a" / "wav").iterdir():
        assert wav.read_bytes() == (tmp_path / "b" / "wav" / wav.name).read_bytes()


def test_seed_summary_prints_mean_and_sd_per_decode_and_mode(tmp_path, capsys):
    scores = {"s1": {"decode_test": 1.87, "decode_test_noisy": 4.5}, "s2": {"decode_test": 1.54, "decode_test_noisy": 2.8},
              "s3": {"decode_test": 1.64}}
    for run, decodes in scores.items():
        for decode, cer in decodes.items():
            d = tmp_path / run / decode / "attention_rescoring"
            d.mkdir(parents=True)
            (d / "cer").write_text(f"utt1 ...\n%CER {cer:.2f} [ 3 / 160, 0 ins, 1 del, 2 sub ]\n%SER 1.00 [ 1 / 12 ]\n")
    runs = [str(tmp_path / r) for r in scores]
    assert seed_summary.main([*runs, "--out", str(tmp_path / "seeds.md")]) == 0
    table = capsys.readouterr().out
    mean, sd = statistics.fmean([1.87, 1.54, 1.64]), statistics.stdev([1.87, 1.54, 1.64])
    assert f"| test | attention_rescoring | 1.87 | 1.54 | 1.64 | {mean:.2f} ± {sd:.2f} |" in table
    assert "| test_noisy | attention_rescoring | 4.50 | 2.80 | - | 3.65 ± 1.20 (2 of 3 runs) |" in table
    assert (tmp_path / "seeds.md").read_text() == table
    assert seed_summary.main([str(tmp_path / "none")]) == 1
