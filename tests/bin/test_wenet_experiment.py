"""A WeNet experiment folder through asrkit's tools as it is: ``recognize`` and ``export``
take WeNet's ``train.yaml`` and ``epoch_5.pt``; ``train --checkpoint`` and ``--enc_init``
start a fine-tuning run from the WeNet checkpoint (tests/fixtures/wenet/offline)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from asrkit.bin import export, recognize
from asrkit.export import load_exported
from asrkit.text import read_units
from tests.helpers import train_here
from tests.models.wenet_reference import FIXTURES, MODES

pytestmark = pytest.mark.usefixtures("restore_threads")  # (tests/conftest.py)

REFERENCE = torch.load(FIXTURES / "offline" / "reference.pt", weights_only=True)


@pytest.fixture
def wenet_dir(tmp_path, monkeypatch):
    """A copy of the WeNet experiment folder with a data list of the three wavs, as the
    working directory (WeNet's saved paths are relative to where it ran)."""
    folder = tmp_path / "exp_conformer"
    shutil.copytree(FIXTURES / "offline", folder)
    texts = dict(line.split(maxsplit=1) for line in (FIXTURES / "wavs" / "text").read_text().splitlines())
    with open(folder / "data.list", "w") as f:
        for utt in REFERENCE["utts"]:
            key = Path(utt["wav"]).stem
            f.write(json.dumps({"key": key, "wav": str(FIXTURES / "wavs" / utt["wav"]), "txt": texts[key]}) + "\n")
    monkeypatch.chdir(folder)
    return folder


def spelled(tokens: list[int], units: list[str]) -> str:
    return "".join(units[t] for t in tokens).replace("▁", " ").strip()


def test_recognize_takes_a_wenet_experiment_as_it_is(wenet_dir):
    assert recognize.main(["--config", "train.yaml", "--checkpoint", "epoch_5.pt", "--data", "data.list",
                           "--result_dir", "decode", "--modes", *MODES, "--beam_size", "4", "--ctc_weight", "0.3",
                           "--reverse_weight", "0.3", "--blank_skip_threshold", "1.0", "--num_threads", "1"]) == 0
    units = read_units(wenet_dir / "units.txt")
    for mode in MODES:
        got = dict((line.split(maxsplit=1) + [""])[:2] for line in (wenet_dir / "decode" / mode / "text").read_text().splitlines())
        for utt in REFERENCE["utts"]:
            assert got[Path(utt["wav"]).stem] == spelled(utt["decode_full"][mode]["tokens"], units), mode


def test_export_takes_a_wenet_experiment_as_it_is(wenet_dir):
    assert export.main(["--config", "train.yaml", "--checkpoint", "epoch_5.pt", "--output", "final.zip"]) == 0
    module, _ = load_exported(wenet_dir / "final.zip")  # (export verifies it against eager decoding)
    assert (module.sos_symbol(), module.eos_symbol(), module.blank_id()) == (2, 2, 0)


@pytest.mark.parametrize("start", ["--checkpoint", "--enc_init"])
def test_fine_tuning_starts_from_a_wenet_checkpoint(wenet_dir, tiny_experiment, start):
    """One epoch on the tiny corpus (its characters are the WeNet model's units) from the
    WeNet weights, then the fine-tuned model decodes."""
    model_dir = wenet_dir / "finetune"
    extra = [start, "epoch_5.pt"] + (["--enc_init_mods", "encoder.,decoder.,ctc."] if start == "--enc_init" else [])
    run = train_here(tiny_experiment, model_dir, wenet_dir / "train.yaml", *extra,
                     "--override", "max_epoch=1", "--override", "dataset_conf.batch_conf.batch_size=16")
    if start == "--checkpoint":
        assert "fine-tuning from WeNet checkpoint" in run.stderr
    else:
        assert "initialised" in run.stderr
    assert (model_dir / "epoch_0.pt").is_file()
    assert recognize.main(["--config", str(model_dir / "train.yaml"), "--checkpoint", str(model_dir / "epoch_0.pt"),
                           "--data", str(tiny_experiment.corpus.splits["test"].data_list), "--result_dir", "ft",
                           "--modes", *MODES, "--beam_size", "4", "--num_threads", "1"]) == 0
    assert all(len((wenet_dir / "ft" / m / "text").read_text().splitlines()) == 12 for m in MODES)
    if start == "--checkpoint":  # the first step started from WeNet's weights, not a fresh model
        first = torch.load(model_dir / "epoch_0.pt", weights_only=True)["model"]
        wenet = torch.load("epoch_5.pt", weights_only=True)
        drift = (first["encoder.encoders.1.feed_forward.w_2.weight"]
                 - wenet["encoder.encoders.1.feed_forward.w_2.weight"]).abs().max()
        assert drift < 0.05
