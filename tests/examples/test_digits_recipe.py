"""The digits recipe end to end at toy scale, in a recipe directory whose path contains spaces:
stages 0-5 and idempotent reruns of the data stages; stage 6 (export) on the streaming and
transducer paths below, a rerun of stage 4 resuming by itself in test_multinode_guide.py (the
README's multi-node commands).  Each stage left out here costs ~4-9 s of python start-ups."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.examples.recipe_helpers import CER_LINE, MODES, copy_recipe, run_recipe
from tests.helpers import free_port

pytestmark = pytest.mark.slow
TOY = ["--train_utts", "60", "--dev_utts", "12", "--test_utts", "12", "--train_config", "conf/train_toy.yaml",
       "--dir", "exp/toy run", "--average_num", "2", "--num_workers", "0",
       # (a few training rooms and noises; the hard test, test_noisy, is not built: tests/tools/test_make_noise_rooms.py)
       "--train_rirs", "2", "--train_noises", "4", "--test_sets", "test",
       # real speech as a fold: george trains (2 takes of each digit, 2 connected utterances), lucas tests
       "--real_speakers", "george lucas", "--real_test_speaker", "lucas", "--real_takes", "2", "--real_connected", "2",
       # the second phase (fine-tuning on synthetic + non-native + real) at toy scale
       "--non_native", "6", "--finetune_overrides",
       "max_epoch=1 dataset_conf.band_limit=true dataset_conf.volume_perturb=true dataset_conf.fbank_conf.dither=0.0"]
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


def test_stages_0_to_5_then_idempotent_reruns(recipe):
    proc = run_recipe(recipe, *TOY, *PORT, "--stop_stage", "5")
    exp = recipe / "exp" / "toy run"
    for mode in MODES:
        assert (exp / "decode_test" / mode / "text").is_file()
        cer = (exp / "decode_test" / mode / "cer").read_text()
        assert re.search(CER_LINE, cer, re.M)
    table = (exp / "decode_test" / "results.md").read_text()
    assert all(f"| {m} |" in table for m in MODES) and table in proc.stdout
    # two phases: the synthetic corpus alone, then from its average with the fold's real speech
    # (george trained beside the synthetic corpus and the non-native voices, lucas is tested)
    def speakers(name):
        return {line.split()[1] for line in (recipe / "data" / name / "utt2spk").read_text().splitlines()}
    assert not {"george", "lucas"} & speakers("train")
    assert "george" in speakers("train_finetune") and "lucas" not in speakers("train_finetune")
    assert speakers("train") < speakers("train_finetune")
    non_native = (recipe / "corpus" / "digits" / "train_non_native" / "utt2spk").read_text().splitlines()
    assert len(non_native) == 6 and {line.split()[1] for line in non_native} <= speakers("train_finetune")
    assert (exp / "synthetic" / "avg_2.pt").is_file()
    assert "second phase: from exp/toy run/synthetic/avg_2.pt" in proc.stderr
    saved = (exp / "train.yaml").read_text()
    assert "band_limit: true" in saved and "dither: 0.0" in saved
    assert "band_limit: false" in (exp / "synthetic" / "train.yaml").read_text()
    for name, count in (("real_test", 20), ("real_test_connected", 2)):
        assert len((recipe / "data" / name / "text").read_text().splitlines()) == count
        assert all(f"| {m} |" in (exp / f"decode_{name}" / "results.md").read_text() for m in MODES)
    assert (exp / "avg_2.pt").is_file() and not (exp / "final.zip").exists()

    prepared = [*(recipe / "data").rglob("*.list"), recipe / "data" / "dict" / "units.txt",
                recipe / "data" / "train" / "global_cmvn"]
    before = digest(prepared)
    rerun = run_recipe(recipe, *TOY, *PORT, "--stop_stage", "3")
    assert digest(prepared) == before
    assert "already synthesized" in rerun.stderr and "global_cmvn exists, statistics of these features: kept" in rerun.stderr




def test_streaming_path_trains_u2pp_and_decodes_full_context_and_in_chunks(recipe):
    """``--streaming true`` (after the test above prepared the data): stages 4-6 train the U2++
    config (causal convolution, dynamic chunks; shrunk here) and decode with full context and
    in chunks (16 and 4 frames here; the recipe's default adds 8), each into its own folder,
    then export."""
    run_recipe(recipe, "--streaming", "true", "--stage", "4", "--num_workers", "0", "--average_num", "1",
               "--real_speakers", "",  # one phase: the synthetic corpus (the transducer test below: two)
               "--streaming_chunks", "16 4",
               "--train_overrides", "max_epoch=1 encoder_conf.num_blocks=2 decoder_conf.num_blocks=1",
               "--test_sets", "test", *PORT)
    exp = recipe / "exp" / "u2pp_cpu"
    saved = (exp / "train.yaml").read_text()
    assert "use_dynamic_chunk: true" in saved and "causal: true" in saved
    for folder in ("decode_test", "decode_test_chunk16", "decode_test_chunk4"):
        table = (exp / folder / "results.md").read_text()
        assert all(f"| {m} |" in table for m in MODES), folder
    assert not (exp / "decode_test_chunk8").exists() and (exp / "final.zip").is_file()
    onnx = sorted(p.name for p in (exp / "onnx").iterdir())
    assert onnx == ["model-streaming.int8.onnx", "model-streaming.onnx", "model.int8.onnx", "model.onnx",
                    "tokens.txt"]


TRANSDUCER_MODES = ["rnnt_greedy_search", "rnnt_beam_search", "modified_beam_search", "rnnt_beam_attn_rescoring",
                    "ctc_beam_td_attn_rescoring", "ctc_greedy_search"]


def test_model_transducer_trains_decodes_in_the_transducer_modes_and_exports(recipe):
    """``--model transducer`` (after the first test prepared the data): stage 4 trains
    conf/train_transducer_cpu.yaml (shrunk here) into exp/transducer_cpu/synthetic, then fine-tunes
    all of it (predictor and joint too) with the real speech into exp/transducer_cpu (the
    recipe's own finetune_overrides: they fit this config), stage 5 decodes in
    the transducer modes with WeNet's rnnt-recipe weights, stage 6 exports final.zip (with the
    transducer searches) and the sherpa-onnx transducer files."""
    proc = run_recipe(recipe, "--model", "transducer", "--stage", "4", "--num_workers", "0", "--average_num", "1",
                      "--train_overrides", "max_epoch=1 encoder_conf.num_blocks=2 decoder_conf.num_blocks=1",
                      "--test_sets", "test", *PORT)
    exp = recipe / "exp" / "transducer_cpu"
    saved = (exp / "train.yaml").read_text()
    assert "model: transducer" in saved and "predictor: embedding" in saved and "band_limit: true" in saved
    assert (exp / "synthetic" / "avg_1.pt").is_file()
    assert re.search(r"initialised \d+ tensors \(cmvn\.,encoder\.,decoder\.,ctc\.,predictor\.,joint\.\)",
                     proc.stdout + proc.stderr)
    table = (exp / "decode_test" / "results.md").read_text()
    for mode in TRANSDUCER_MODES:
        assert re.search(CER_LINE, (exp / "decode_test" / mode / "cer").read_text(), re.M), mode
        assert f"| {mode} |" in table
    assert "rnnt_greedy_search" in proc.stderr and (exp / "final.zip").is_file()
    assert {"encoder.onnx", "decoder.onnx", "joiner.onnx", "tokens.txt"} <= {f.name for f in (exp / "onnx").iterdir()}
