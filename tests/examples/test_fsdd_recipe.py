"""examples/fsdd/s0: the real-speech recipe at toy scale -- stage 0 unpacks the shipped
recordings and splits them by speaker, stages 1-5 train a tiny model on one speaker's takes
and decode the held-out speaker's connected utterances."""
from __future__ import annotations

import re

import pytest

from tests.examples.recipe_helpers import CER_LINE, MODES, copy_recipe, read_lines, run_recipe
from tests.helpers import free_port


@pytest.mark.slow
def test_toy_stages_0_to_5_hold_a_speaker_out(tmp_path):
    recipe = copy_recipe("fsdd", tmp_path / "fsdd recipe")
    run_recipe(recipe, "--stage", "0", "--stop_stage", "5", "--train_speakers", "george", "--connected", "2",
               "--train_config", "conf/train_toy.yaml", "--train_overrides", "max_epoch=1", "--dir", "exp/toy run",
               "--average_num", "1", "--num_workers", "0", "--test_sets", "test_connected",
               "--master_port", str(free_port()))
    speakers = {s: {line.split()[1] for line in read_lines(recipe / "data" / s / "utt2spk")}
                for s in ("train", "dev", "test", "test_connected")}
    assert speakers == {"train": {"george"}, "dev": {"nicolas"}, "test": {"lucas"}, "test_connected": {"lucas"}}
    assert len(read_lines(recipe / "data" / "train" / "data.list")) == 502
    assert (recipe / "corpus" / "fsdd" / "recordings" / "7_lucas_32.flac").is_file()
    log = (recipe / "exp" / "toy run" / "log" / "rank0.log").read_text()
    assert "502 utterances trained, 0 skipped" in log
    for mode in MODES:
        assert re.search(CER_LINE, (recipe / "exp" / "toy run" / "decode_test_connected" / mode / "cer").read_text(),
                         re.M)
