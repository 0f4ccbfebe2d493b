"""The digits recipe end to end at toy scale: stages 0-6 and idempotent reruns, in a recipe
directory whose path contains spaces (the README's multi-node commands: test_multinode_guide.py)."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.examples.recipe_helpers import CER_LINE, MODES, copy_recipe, run_recipe
from tests.helpers import free_port

pytestmark = pytest.mark.slow
TOY = ["--train_utts", "60", "--dev_utts", "12", "--test_utts", "12", "--train_config", "conf/train_toy.yaml",
       "--dir", "exp/toy run", "--average_num", "2", "--num_workers", "0"]
PORT = ["--master_port", str(free_port())]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    """A copy of the recipe directory under a path with spaces."""
    return copy_recipe("digits", tmp_path_factory.mktemp("recipe") / "my recipes" / "digits s0")


def digest(paths) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def test_stages_0_to_6_then_idempotent_reruns(recipe):
    proc = run_recipe(recipe, *TOY, *PORT)
    exp = recipe / "exp" / "toy run"
    for mode in MODES:
        assert (exp / "decode_test" / mode / "text").is_file()
        cer = (exp / "decode_test" / mode / "cer").read_text()
        assert re.search(CER_LINE, cer, re.M)
    table = (exp / "decode_test" / "results.md").read_text()
    assert all(f"| {m} |" in table for m in MODES) and table in proc.stdout
    assert (exp / "final.zip").is_file() and (exp / "avg_2.pt").is_file()

    prepared = [*(recipe / "data").rglob("*.list"), recipe / "data" / "dict" / "units.txt",
                recipe / "data" / "train" / "global_cmvn"]
    before = digest(prepared)
    rerun = run_recipe(recipe, *TOY, *PORT, "--stop_stage", "4")
    assert digest(prepared) == before
    assert "already synthesized" in rerun.stderr and "exists, skipped" in rerun.stderr
    assert "resumed from" in rerun.stderr  # stage 4 resumes (and finds nothing left to train)
    assert "epoch 2:" not in rerun.stderr


