"""examples/sentences/s0: the BPE sentences recipe, stages 0-5 at toy scale (a few dozen
synthesized grammar sentences, a tiny model, the recipe's default CPU launch of 2 gloo
processes capped at the cores, with its single-voice warm start), scored in words (WER) and
characters."""
from __future__ import annotations

import json
import os
import re

import pytest

from tests.examples.recipe_helpers import CER_LINE, MODES, copy_recipe, read_lines, run_recipe
from tests.helpers import free_port

WER_LINE = CER_LINE.replace("CER", "WER")


@pytest.mark.slow
def test_toy_stages_0_to_5(tmp_path):
    recipe = copy_recipe("sentences", tmp_path / "sentences recipe")
    proc = run_recipe(recipe, "--stage", "0", "--stop_stage", "5", "--train_utts", "40", "--dev_utts", "8",
                      "--test_utts", "8", "--single_voice_utts", "16", "--single_voice_steps", "2",
                      "--nbpe", "60", "--train_config", "conf/train_toy.yaml",
                      "--dir", "exp/toy run", "--average_num", "2", "--num_workers", "0",
                      "--master_port", str(free_port()))
    # stage 0: speaker-independent splits of grammar sentences
    speakers = {s: {line.split()[1] for line in read_lines(recipe / "data" / s / "utt2spk")}
                for s in ("train", "dev", "test")}
    assert len(read_lines(recipe / "data" / "train" / "text")) == 40
    assert not speakers["train"] & speakers["test"] and not speakers["train"] & speakers["dev"]
    # stage 2: the BPE model the options asked for, its pieces as units
    assert (recipe / "data" / "dict" / "bpe60_bpe.model").is_file()
    units = read_lines(recipe / "data" / "dict" / "bpe60_bpe_units.txt")
    assert units[0].split()[0] == "<blank>" and any(u.startswith("▁") for u in units)
    entries = [json.loads(line) for line in read_lines(recipe / "data" / "train" / "data.list")]
    assert len(entries) == 40 and all(e["duration"] > 0.5 for e in entries)
    # the curriculum's single clean voice is a train voice, never a dev/test one
    single = {line.split()[1] for line in read_lines(recipe / "data" / "train_single" / "utt2spk")}
    assert len(single) == 1 and not single & (speakers["dev"] | speakers["test"])
    assert len(read_lines(recipe / "data" / "train_single" / "data.list")) == 16
    # stage 4: 2 gloo processes on CPU, the stage-2 model handed to the trainer
    exp = recipe / "exp" / "toy run"
    # stage 4, first: the trainer's warm start on the single voice stops at its step budget,
    # with its own override (the warmup of the single_voice_overrides)
    single_log = (exp / "warm_start" / "log" / "rank0.log").read_text()
    # the recipe's CPU launch: cpu_nproc_per_node=2 capped at the cores this process may use
    # (under tests/run.sh's xdist workers, each worker has its own core)
    procs = min(2, len(os.sched_getaffinity(0)))
    assert f"world size {procs} (1 node(s) x {procs})" in single_log
    assert "reached max_steps=2" in single_log and (exp / "warm_start" / "step_2.pt").is_file()
    assert "warmup_steps: 250" in (exp / "warm_start" / "train.yaml").read_text()
    log = (exp / "log" / "rank0.log").read_text()
    assert f"world size {procs} (1 node(s) x {procs})" in log and "40 utterances trained, 0 skipped" in log
    assert re.search(r"initialised \d+ tensors \(encoder\.,decoder\.,ctc\.\) from .*warm_start/step_2\.pt", log)
    assert "warmup_steps: 250" not in (exp / "train.yaml").read_text()
    assert "bpe60_bpe.model" in (exp / "train.yaml").read_text()
    assert "bpe60_bpe_units.txt" in (exp / "train.yaml").read_text()
    # stage 5: every mode scored in characters and words
    for mode in MODES:
        assert re.search(CER_LINE, (exp / "decode_test" / mode / "cer").read_text(), re.M)
        assert re.search(WER_LINE, (exp / "decode_test" / mode / "wer").read_text(), re.M)
    table = (exp / "decode_test" / "results.md").read_text()
    assert "WER %" in table and all(f"| {m} |" in table for m in MODES) and table in proc.stdout
