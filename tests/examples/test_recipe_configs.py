"""Every config a recipe ships trains on the data its stages prepare: the features it computes
are those of the global CMVN stage 1 writes (with the recipe's default ``train_config``), so
``--train_config conf/<any>.yaml --stage 4`` after a full run needs no other CMVN."""
from __future__ import annotations

import re

import pytest

from asrkit.config import load_config
from asrkit.data.features import feature_record
from tests.helpers import REPO

RECIPES = sorted(p.parent for p in REPO.glob("examples/*/s0/run.sh"))


def default_config(recipe) -> str:
    """The recipe's ``train_config=`` (its own run.sh, else tools/recipe_defaults.sh)."""
    for script in (recipe / "run.sh", REPO / "tools" / "recipe_defaults.sh"):
        found = re.search(r"^train_config=(\S+)", script.read_text(encoding="utf-8"), re.M)
        if found:
            return found.group(1)
    raise AssertionError(f"{recipe}: no train_config")


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.parent.name for r in RECIPES])
def test_every_shipped_config_computes_the_features_of_the_recipes_cmvn(recipe):
    """... or, computing other features (the digits recipe's Whisper log-mel), names another
    CMVN file (stage 1's ``name=``), so that the two statistics never overwrite each other."""
    default = load_config(recipe / default_config(recipe))
    want = feature_record(default.dataset_conf)
    configs = sorted((recipe / "conf").glob("*.yaml"))
    assert any(c.name == "train_toy.yaml" for c in configs)
    for config in configs:
        cfg = load_config(config)
        if feature_record(cfg.dataset_conf) != want:
            assert cfg.cmvn_conf.cmvn_file not in (None, default.cmvn_conf.cmvn_file), config.relative_to(REPO)


def test_the_digits_fine_tuning_phase_overrides_fit_every_model_config():
    """run.sh's finetune_overrides (the second phase, with real speakers) load over each of the
    model configs -- the keys exist, the values pass the schemas -- and keep the features
    of the first phase, whose CMVN the second phase takes over."""
    recipe = REPO / "examples" / "digits" / "s0"
    script = (recipe / "run.sh").read_text(encoding="utf-8")
    overrides = re.search(r'^finetune_overrides="([^"]*)"', script, re.M).group(1).split()
    assert "dataset_conf.band_limit=true" in overrides and "dataset_conf.volume_perturb=true" in overrides
    for name in ("train_conformer_cpu", "train_u2pp_conformer_cpu", "train_transducer_cpu",
                 "train_u2pp_transducer_cpu", "train_branchformer_cpu", "train_e_branchformer_cpu",
                 "train_squeezeformer_cpu", "train_efficient_conformer_cpu"):
        first = load_config(recipe / "conf" / f"{name}.yaml")
        second = load_config(recipe / "conf" / f"{name}.yaml", overrides)
        assert second.dataset_conf.band_limit and second.dataset_conf.volume_perturb and not first.dataset_conf.band_limit
        assert feature_record(second.dataset_conf) == feature_record(first.dataset_conf), name
