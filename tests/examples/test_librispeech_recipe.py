"""The LibriSpeech recipe on a tiny fabricated corpus in the real layout (English sentences
spoken by espeak-ng, 16 kHz FLAC, ``<speaker>-<chapter>.trans.txt`` per chapter), everything
under paths with spaces: data prep output (subsets combined, FLAC paths), subset choice and
error messages, the download stage against a local HTTP server, the configs, and stages
1-5 at toy scale with a small sentencepiece vocabulary."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.recipe_helpers import (CER_LINE, MODES, copy_recipe, make_tgz, read_lines, run_recipe,
                                           serve_directory, synthesize)
from tests.helpers import REPO, free_port, repo_env
from asrkit.text.vocabulary import Vocabulary

RECIPE = REPO / "examples" / "librispeech" / "s0"
PREP = RECIPE / "local" / "librispeech_data_prep.py"

# subset -> (speaker, chapter, espeak voice, transcripts)
CHAPTERS = {
    "train-clean-100": [
        ("103", "1240", "en-us", ["THE OLD MAN WALKED SLOWLY DOWN THE ROAD",
                                  "SHE OPENED THE WINDOW AND LOOKED AT THE SEA",
                                  "IT WAS A COLD MORNING IN THE VILLAGE",
                                  "HE COULDN'T FIND HIS WAY BACK HOME"]),
        ("1034", "121119", "en-gb", ["THE CHILDREN PLAYED IN THE GARDEN ALL DAY",
                                     "WE READ THE LETTER TWICE BEFORE DINNER",
                                     "THE SHIP SAILED AT THE BREAK OF DAY"]),
    ],
    "train-other-500": [
        ("1006", "135212", "en-gb-scotland", ["A LIGHT RAIN FELL ON THE QUIET TOWN",
                                              "THEY SPOKE OF THE WAR AND THE KING",
                                              "HER FATHER'S HOUSE STOOD ON THE HILL"]),
    ],
    "dev-clean": [("1272", "128104", "en-us", ["THE MAN OPENED THE DOOR", "IT WAS A QUIET DAY IN THE TOWN"])],
    "dev-other": [("116", "288045", "en-gb", ["SHE WALKED TO THE SEA", "THE KING READ THE LETTER"])],
    "test-clean": [("1089", "134686", "en-us", ["THE CHILDREN LOOKED AT THE SHIP", "HE WALKED HOME IN THE RAIN"])],
    "test-other": [("1688", "142285", "en-gb", ["THE OLD HOUSE STOOD IN THE VILLAGE", "WE PLAYED IN THE GARDEN"])],
}
SETS = {"train": ["train-clean-100", "train-other-500"], "dev": ["dev-clean", "dev-other"],
        "test_clean": ["test-clean"], "test_other": ["test-other"]}
FLAC_WITHOUT_TEXT = "103-1240-0099"      # audio in train-clean-100, no transcript line
TEXT_WITHOUT_FLAC = "103-1240-0098"      # transcript line, no audio


def utterances(subset: str):
    """(key, speaker, chapter, text) of a subset."""
    for spk, chapter, _, texts in CHAPTERS[subset]:
        for i, text in enumerate(texts):
            yield f"{spk}-{chapter}-{i:04d}", spk, chapter, text


def build_corpus(root: Path) -> Path:
    """``root/LibriSpeech/<subset>/<speaker>/<chapter>/{*.flac, <speaker>-<chapter>.trans.txt}``."""
    for subset, chapters in CHAPTERS.items():
        for spk, chapter, voice, _ in chapters:
            d = root / "LibriSpeech" / subset / spk / chapter
            lines = []
            for key, _, _, text in utterances(subset):
                if key.startswith(f"{spk}-{chapter}-"):
                    synthesize(text.lower(), voice, d / f"{key}.flac")
                    lines.append(f"{key} {text}\n")
            if spk == "103":
                synthesize("an extra recording", voice, d / f"{FLAC_WITHOUT_TEXT}.flac")
                lines.append(f"{TEXT_WITHOUT_FLAC} A LINE WITHOUT ITS RECORDING\n")
            (d / f"{spk}-{chapter}.trans.txt").write_text("".join(sorted(lines)), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("librispeech") / "my corpora" / "openslr 12")


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory):
    """The recipe copied under a path with spaces, after stage 0; (recipe dir, stage 0 output)."""
    recipe = copy_recipe("librispeech", tmp_path_factory.mktemp("recipe") / "my recipes" / "librispeech s0")
    proc = run_recipe(recipe, "--stage", "0", "--stop_stage", "0", "--data", str(corpus))
    return recipe, proc


def run_prep(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PREP), *map(str, args)], capture_output=True, text=True,
                          env=repo_env())


def expected(corpus: Path, subsets: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Expected wav.scp, text and utt2spk lines of a set combining ``subsets``."""
    utts = sorted((key, subset, spk, chapter, text) for subset in subsets
                  for key, spk, chapter, text in utterances(subset))
    base = corpus / "LibriSpeech"
    return ([f"{k} {base / sub / spk / ch / k}.flac" for k, sub, spk, ch, _ in utts],
            [f"{k} {text}" for k, *_, text in utts],
            [f"{k} {spk}" for k, _, spk, *_ in utts])


def test_prep_combines_subsets(prepared, corpus):
    recipe, proc = prepared
    for name, subsets in SETS.items():
        wav_scp, text, utt2spk = expected(corpus, subsets)
        d = recipe / "data" / name
        assert read_lines(d / "wav.scp") == wav_scp
        assert read_lines(d / "text") == text
        assert read_lines(d / "utt2spk") == utt2spk
    assert sorted(p.name for p in (recipe / "data").iterdir()) == sorted(SETS)
    assert "1034-121119-0000 THE CHILDREN PLAYED IN THE GARDEN ALL DAY" in read_lines(recipe / "data" / "train" / "text")
    assert "103-1240-0003 HE COULDN'T FIND HIS WAY BACK HOME" in read_lines(recipe / "data" / "train" / "text")
    assert "train subset(s) not found" in proc.stderr and "train-clean-360" in proc.stderr
    assert f"dropped 1 flac without transcript ({FLAC_WITHOUT_TEXT})" in proc.stderr
    assert f"dropped 1 transcript without flac ({TEXT_WITHOUT_FLAC})" in proc.stderr
    assert "train: 10 utterances from train-clean-100 + train-other-500" in proc.stderr


def test_prep_subset_choice(corpus, tmp_path):
    out = tmp_path / "out"
    proc = run_prep("--train_subsets", "train-clean-100", "--dev_subsets", "dev-other", "--test_subsets",
                    "test-other", corpus / "LibriSpeech", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["dev", "test_other", "train"]
    assert read_lines(out / "train" / "text") == expected(corpus, ["train-clean-100"])[1]
    assert read_lines(out / "dev" / "wav.scp") == expected(corpus, ["dev-other"])[0]

    proc = run_prep("--train_subsets", "train-clean-360", corpus, out)
    assert proc.returncode == 1 and "none of the train subsets train-clean-360" in proc.stderr


def test_prep_errors(tmp_path):
    chapter = tmp_path / "LibriSpeech" / "train-clean-100" / "84" / "121123"
    chapter.mkdir(parents=True)
    (chapter / "84-121123-0000.flac").write_bytes(b"")
    for subset in ("dev-clean", "test-clean"):
        (tmp_path / "LibriSpeech" / subset).mkdir()
    proc = run_prep(tmp_path, tmp_path / "out")
    assert proc.returncode == 1 and "chapter without transcript" in proc.stderr and "84-121123.trans.txt" in proc.stderr

    (chapter / "84-121123.trans.txt").write_text("84-999-0000 WRONG CHAPTER\n")
    proc = run_prep(tmp_path, tmp_path / "out")
    assert proc.returncode == 1 and "does not belong to chapter 84/121123" in proc.stderr

    (chapter.parent.parent / "notes").mkdir()
    proc = run_prep(tmp_path, tmp_path / "out")
    assert proc.returncode == 1 and "unexpected speaker directory" in proc.stderr

    proc = run_prep(tmp_path / "nowhere", tmp_path / "out")
    assert proc.returncode == 1 and "corpus directory not found" in proc.stderr


def test_download_stage_from_local_server(corpus, tmp_path):
    """Stage -1 against an HTTP server holding <subset>.tar.gz tarballs that unpack into
    LibriSpeech/<subset>/, then stage 0; a rerun skips the finished subsets."""
    served = tmp_path / "served"
    for subset in ("train-clean-100", "dev-clean", "test-clean"):
        make_tgz(served / f"{subset}.tar.gz", corpus, f"LibriSpeech/{subset}")
    recipe = copy_recipe("librispeech", tmp_path / "recipe s0")
    target = tmp_path / "down load"
    opts = ["--data", str(target), "--train_subsets", "train-clean-100", "--dev_subsets", "dev-clean",
            "--test_subsets", "test-clean"]
    with serve_directory(served) as url:
        run_recipe(recipe, "--stage", "-1", "--stop_stage", "0", "--data_url", url, *opts)
        rerun = run_recipe(recipe, "--stage", "-1", "--stop_stage", "-1", "--data_url", url + "/missing", *opts)
    assert rerun.stderr.count("already extracted, skipped") == 3
    assert (target / "LibriSpeech" / "dev-clean" / ".complete").is_file()
    assert read_lines(recipe / "data" / "test_clean" / "text") == expected(corpus, ["test-clean"])[1]
    assert read_lines(recipe / "data" / "train" / "utt2spk") == expected(corpus, ["train-clean-100"])[2]


def test_configs_load():
    from asrkit.config import load_config
    from asrkit.models.registry import build_model

    cfg = load_config(RECIPE / "conf" / "train_conformer.yaml")
    assert cfg.tokenizer == "bpe" and cfg.tokenizer_conf.bpe_path == "data/dict/bpe.model"
    assert cfg.encoder_conf.cnn_module_kernel == 31 and cfg.encoder_conf.cnn_module_norm == "batch_norm"
    model = build_model(cfg, 80, Vocabulary.of_size(5002), load_cmvn_stats=False)
    assert sum(p.numel() for p in model.parameters()) == 46_838_548
    toy = load_config(RECIPE / "conf" / "train_toy.yaml")
    assert toy.tokenizer == "bpe" and toy.max_epoch <= 2


@pytest.mark.slow
def test_toy_stages_1_to_5(prepared):
    recipe, _ = prepared
    proc = run_recipe(recipe, "--stage", "1", "--stop_stage", "5", "--train_config", "conf/train_toy.yaml",
                      "--nbpe", "50", "--dir", "exp/toy run", "--average_num", "2", "--num_workers", "0",
                      "--master_port", str(free_port()))
    assert (recipe / "data" / "dict" / "bpe.model").is_file()
    units = read_lines(recipe / "data" / "dict" / "units.txt")
    assert 10 < len(units) <= 53 and any(u.startswith("▁") for u in units)
    # stage 2 again: the same pieces are kept, other pieces train a new model
    same = run_recipe(recipe, "--stage", "2", "--stop_stage", "2", "--nbpe", "50")
    assert "(unigram, 50), skipped" in same.stderr and read_lines(recipe / "data" / "dict" / "units.txt") == units
    other = run_recipe(recipe, "--stage", "2", "--stop_stage", "2", "--nbpe", "30")
    assert "sentencepiece units (unigram, 30)" in other.stderr
    assert len(read_lines(recipe / "data" / "dict" / "units.txt")) <= 33
    entries = [json.loads(line) for line in read_lines(recipe / "data" / "train" / "data.list")]
    assert len(entries) == 10 and all(e["wav"].endswith(".flac") and e["duration"] > 0.5 for e in entries)
    exp = recipe / "exp" / "toy run"
    log = (exp / "log" / "rank0.log").read_text()
    assert "10 utterances trained, 0 skipped" in log and "(4 utterances)" in log  # FLAC read in training and CV
    for test_set in ("test_clean", "test_other"):
        for mode in MODES:
            assert re.search(CER_LINE, (exp / f"decode_{test_set}" / mode / "cer").read_text(), re.M)
        table = (exp / f"decode_{test_set}" / "results.md").read_text()
        assert all(f"| {m} |" in table for m in MODES) and table in proc.stdout
