"""The encoder configs of the digits recipe's comparison (docs/recipes.md, "Comparing encoders"):
each is the default conformer config with only the encoder swapped, within ±5 % of its
parameters (the counts its comment states), and its encoder trains (toy scale, 2 steps)."""
from __future__ import annotations

import re

import pytest
import torch

from asrkit.config import load_config, read_yaml
from asrkit.models import build_model, count_parameters
from asrkit.text.vocabulary import Vocabulary
from tests.helpers import REPO, train_here

pytestmark = pytest.mark.usefixtures("restore_threads")

CONF = REPO / "examples" / "digits" / "s0" / "conf"
DEFAULT = CONF / "train_conformer_cpu.yaml"
ENCODERS = {"branchformer": "branchformer", "e_branchformer": "e_branchformer", "squeezeformer": "squeezeformer",
            "efficient_conformer": "efficientConformer"}
UNITS = 19  # the recipe's character units (data/dict/units.txt: blank, unk, 16 letters, ▁, sos/eos)


def parameters(path) -> tuple[int, int]:
    model = build_model(load_config(path), 80, Vocabulary.of_size(UNITS), cmvn_stats=(torch.zeros(80), torch.ones(80)))
    return count_parameters(model), count_parameters(model.encoder)


@pytest.mark.parametrize("name", ENCODERS)
def test_only_the_encoder_is_swapped_at_the_conformers_parameter_count(name):
    path = CONF / f"train_{name}_cpu.yaml"
    raw, default = read_yaml(path), read_yaml(DEFAULT)
    assert raw["encoder"] == ENCODERS[name]
    assert {k: v for k, v in raw.items() if k != "encoder_conf" and k != "encoder"} == \
        {k: v for k, v in default.items() if k != "encoder_conf" and k != "encoder"}
    total, encoder = parameters(path)
    want_total, want_encoder = parameters(DEFAULT)
    assert abs(total / want_total - 1) <= 0.05, (total, want_total)
    stated = re.search(r"^# Parameters \(asrkit's build_model, 19 units\): ([0-9,]+) \(encoder ([0-9,]+)\), against "
                       r"the\n# default conformer's ([0-9,]+) \(encoder ([0-9,]+)\): ([-+][0-9.]+) %",
                       path.read_text(encoding="utf-8"), re.M)
    assert stated, f"{path.name}: no parameter comment"
    assert [int(g.replace(",", "")) for g in stated.groups()[:4]] == [total, encoder, want_total, want_encoder]
    assert float(stated.group(5)) == round(100 * (total / want_total - 1), 1)


def test_the_efficient_conformer_trains_two_steps(tiny_experiment, tmp_path):
    """The most unusual of the four (conv2d2 front end, a strided block, grouped attention) at its
    recipe size, on the tiny corpus's 40-bin features."""
    raw = read_yaml(CONF / "train_efficient_conformer_cpu.yaml")
    cfg = tiny_experiment.config(tmp_path / "train.yaml", encoder=raw["encoder"], encoder_conf=raw["encoder_conf"])
    run = train_here(tiny_experiment, tmp_path / "exp", cfg, "--max_steps", 2)
    assert "reached max_steps=2" in run.stderr
    assert "efficientConformer encoder" in run.stderr
    assert (tmp_path / "exp" / "step_2.pt").is_file()
