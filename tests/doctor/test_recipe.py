"""``asrkit.doctor.recipe``: the job a recipe's stage 4 trains, read from its run.sh."""
from __future__ import annotations

import pytest

from asrkit.doctor.recipe import RecipeError, RecipeJob, assignments, complete_job, recipe_job
from tests.helpers import REPO


def test_the_digits_recipe_trains_its_cpu_config():
    assert recipe_job(REPO / "examples" / "digits" / "s0") == RecipeJob(
        "conf/train_conformer_cpu.yaml", "data/train/data.list", "data/dev/data.list")


def test_assignments_before_the_options_at_the_start_of_a_line():
    text = ("a=1; b='two words'  # comment\nc=\"$a/x\"\n  d=indented\nif true; then\n  a=9\nfi\n"
            "e=5 # note\n. tools/parse_options.sh\na=after\n")
    assert assignments(text) == {"a": "1", "b": "two words", "c": None, "e": "5"}


def test_shards_sets_and_defaults(tmp_path):
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "recipe_defaults.sh").write_text("data_type=raw\ntrain_config=conf/train_conformer.yaml\n")
    (tmp_path / "run.sh").write_text(". tools/recipe_defaults.sh\ndata_type=shard\n. tools/parse_options.sh\n"
                                     "stage_train 4 config=\"$train_config\" \\\n  train=train_960 cv=dev_clean\n")
    assert recipe_job(tmp_path) == RecipeJob("conf/train_conformer.yaml", "data/train_960/data.shards.list",
                                             "data/dev_clean/data.shards.list")
    job, found = complete_job("my.yaml", None, "cv.list", tmp_path)
    assert (job, found) == (RecipeJob("my.yaml", "data/train_960/data.shards.list", "cv.list"), ["--train_data"])
    assert complete_job("a.yaml", "t", "c", tmp_path / "nowhere") == (RecipeJob("a.yaml", "t", "c"), [])


def test_a_run_sh_without_train_config_says_what_to_pass(tmp_path):
    (tmp_path / "run.sh").write_text("train_config=$1\n")
    with pytest.raises(RecipeError, match=r"^--config not given and .*run.sh sets no plain train_config=\.\.\. "
                                          r"before its options: pass --config conf/X.yaml"):
        complete_job(None, "t.list", "c.list", tmp_path)
