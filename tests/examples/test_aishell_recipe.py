"""The AISHELL-1 recipe on a tiny fabricated corpus in the real layout (Mandarin sentences
spoken by espeak-ng, 16 kHz 16-bit wav), everything under paths with spaces: data prep
output and its error messages, the download stage against a local HTTP server, the
configs, and stages 1-5 at toy scale."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.recipe_helpers import (CER_LINE, MODES, copy_recipe, make_tgz, read_lines, run_recipe,
                                           serve_directory, synthesize)
from tests.helpers import REPO, free_port, repo_env
from asrkit.text.vocabulary import Vocabulary

RECIPE = REPO / "examples" / "aishell" / "s0"
PREP = RECIPE / "local" / "aishell_data_prep.py"

# (set, speaker, utterance number, transcript as in aishell_transcript_v0.8.txt)
UTTERANCES = [
    ("train", "S0002", 121, "今天 北京 的 天气 很 好"),
    ("train", "S0002", 122, "而 对 楼市 成交 抑制 作用 最 大 的 限 购"),
    ("train", "S0002", 123, "我们 明天 一起 去 公园 散步"),
    ("train", "S0002", 124, "这 家 公司 的 股票 上涨 了"),
    ("train", "S0003", 201, "城市 交通 问题 需要 解决"),
    ("train", "S0003", 202, "他 在 学校 学习 中文"),
    ("train", "S0003", 203, "新 的 政策 将 于 下 个 月 实施"),
    ("train", "S0003", 204, "房价 调控 继续 加强"),
    ("dev", "S0724", 301, "北京 的 股票 市场 上涨 了"),
    ("dev", "S0724", 302, "明天 的 天气 很 好"),
    ("dev", "S0724", 303, "公司 需要 新 的 政策"),
    ("test", "S0764", 401, "我们 在 北京 学习 中文"),
    ("test", "S0764", 402, "城市 房价 继续 上涨"),
    ("test", "S0764", 403, "他 明天 去 学校"),
]
WAV_WITHOUT_TEXT = ("train", "S0003", 299, "春天 来 了")   # audio, no transcript line
TEXT_WITHOUT_WAV = ("train", "S0002", 199, "没有 录音 的 句子")  # transcript line, no audio


def key(spk: str, n: int) -> str:
    return f"BAC009{spk}W{n:04d}"


def build_corpus(root: Path) -> Path:
    """``root/data_aishell/{wav/<set>/<spk>/<utt>.wav, transcript/aishell_transcript_v0.8.txt}``."""
    aishell = root / "data_aishell"
    for s, spk, n, text in UTTERANCES + [WAV_WITHOUT_TEXT]:
        synthesize(text.replace(" ", ""), "cmn", aishell / "wav" / s / spk / f"{key(spk, n)}.wav")
    lines = [f"{key(spk, n)} {text}\n" for _, spk, n, text in UTTERANCES + [TEXT_WITHOUT_WAV]]
    (aishell / "transcript").mkdir(parents=True)
    (aishell / "transcript" / "aishell_transcript_v0.8.txt").write_text("".join(sorted(lines)), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("aishell") / "my corpora" / "openslr 33")


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory):
    """The recipe copied under a path with spaces, after stage 0; (recipe dir, stage 0 output)."""
    recipe = copy_recipe("aishell", tmp_path_factory.mktemp("recipe") / "my recipes" / "aishell s0")
    proc = run_recipe(recipe, "--stage", "0", "--stop_stage", "0", "--data", str(corpus))
    return recipe, proc


def run_prep(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PREP), *map(str, args)], capture_output=True, text=True,
                          env=repo_env())


def test_prep_writes_kaldi_files(prepared, corpus):
    recipe, proc = prepared
    wav_root = corpus / "data_aishell" / "wav"
    for s in ("train", "dev", "test"):
        utts = sorted((key(spk, n), spk, text) for ss, spk, n, text in UTTERANCES if ss == s)
        d = recipe / "data" / s
        assert read_lines(d / "wav.scp") == [f"{k} {wav_root / s / spk / k}.wav" for k, spk, _ in utts]
        assert read_lines(d / "text") == [f"{k} {text.replace(' ', '')}" for k, _, text in utts]
        assert read_lines(d / "utt2spk") == [f"{k} {spk}" for k, spk, _ in utts]
    assert read_lines(recipe / "data" / "train" / "text")[1] == "BAC009S0002W0122 而对楼市成交抑制作用最大的限购"
    assert "train: 8 utterances from 2 speakers" in proc.stderr
    assert f"dropped 1 wav(s) without transcript ({key('S0003', 299)})" in proc.stderr
    assert f"dropped 1 transcript line(s) without audio ({key('S0002', 199)})" in proc.stderr


def test_prep_is_idempotent_and_accepts_data_aishell_itself(prepared, corpus, tmp_path):
    recipe, _ = prepared
    out = tmp_path / "out"
    assert run_prep(corpus / "data_aishell", out).returncode == 0
    for s in ("train", "dev", "test"):
        for f in ("wav.scp", "text", "utt2spk"):
            assert (out / s / f).read_bytes() == (recipe / "data" / s / f).read_bytes()
    mtime = (out / "train" / "text").stat().st_mtime_ns
    assert run_prep(corpus, out).returncode == 0
    assert (out / "train" / "text").stat().st_mtime_ns == mtime  # unchanged files are not rewritten


def test_prep_errors(tmp_path):
    root = tmp_path / "data_aishell"
    (root / "wav").mkdir(parents=True)
    (root / "transcript").mkdir()
    (root / "wav" / "S0002.tar.gz").write_bytes(b"")
    (root / "transcript" / "aishell_transcript_v0.8.txt").write_text("BAC009S0002W0121 今天\n")
    proc = run_prep(tmp_path, tmp_path / "out")
    assert proc.returncode == 1 and "packed speaker archive" in proc.stderr and "tar -xzf" in proc.stderr

    (root / "transcript" / "aishell_transcript_v0.8.txt").unlink()
    proc = run_prep(tmp_path, tmp_path / "out")
    assert proc.returncode == 1 and "transcript not found" in proc.stderr

    (root / "transcript" / "aishell_transcript_v0.8.txt").write_text("K1 今天\nK1 明天\n")
    proc = run_prep(tmp_path, tmp_path / "out")
    assert proc.returncode == 1 and "K1 already has a different transcript (line 1)" in proc.stderr

    proc = run_prep(tmp_path / "nowhere", tmp_path / "out")
    assert proc.returncode == 1 and "data_aishell" in proc.stderr


def test_download_stage_from_local_server(corpus, tmp_path):
    """Stage -1 against an HTTP server holding data_aishell.tgz with per-speaker archives
    inside, as openslr ships it; then stage 0 on the result; a rerun skips the download."""
    pack = tmp_path / "pack"
    wav = corpus / "data_aishell" / "wav"
    for s, spk in {(s, spk) for s, spk, _, _ in UTTERANCES}:
        make_tgz(pack / "data_aishell" / "wav" / f"{spk}.tar.gz", wav, f"{s}/{spk}")
    shutil.copytree(corpus / "data_aishell" / "transcript", pack / "data_aishell" / "transcript")
    served = tmp_path / "served"
    make_tgz(served / "data_aishell.tgz", pack, "data_aishell")

    recipe = copy_recipe("aishell", tmp_path / "recipe s0")
    target = tmp_path / "down load"
    with serve_directory(served) as url:
        run_recipe(recipe, "--stage", "-1", "--stop_stage", "0", "--data", str(target), "--data_url", url)
        assert not list((target / "data_aishell" / "wav").glob("*.tar.gz"))
        assert (target / "data_aishell" / ".complete").is_file()
        rerun = run_recipe(recipe, "--stage", "-1", "--stop_stage", "-1", "--data", str(target),
                           "--data_url", url + "/missing")
    assert "already extracted, skipped" in rerun.stderr
    texts = read_lines(recipe / "data" / "test" / "text")
    assert texts == [f"{key(spk, n)} {t.replace(' ', '')}" for s, spk, n, t in UTTERANCES if s == "test"]


def test_configs_load_and_match_the_shared_conformer():
    from asrkit.config import load_config, read_yaml, to_dict
    from asrkit.models.registry import build_model

    shared = read_yaml(REPO / "conf" / "train_conformer.yaml")
    cfg = load_config(RECIPE / "conf" / "train_conformer.yaml")
    resolved = to_dict(cfg)
    shared_resolved = to_dict(load_config(REPO / "conf" / "train_conformer.yaml"))
    for k in shared:  # model, CMVN and optimisation keys identical to conf/train_conformer.yaml
        assert resolved[k] == shared_resolved[k], k
    assert cfg.dataset_conf.speed_perturb and cfg.dataset_conf.batch_conf.batch_size == 16
    model = build_model(cfg, 80, Vocabulary.of_size(4233), load_cmvn_stats=False)
    assert sum(p.numel() for p in model.parameters()) == 46_197_266
    toy = load_config(RECIPE / "conf" / "train_toy.yaml")
    assert toy.tokenizer == "char" and toy.max_epoch <= 2


@pytest.mark.slow
def test_toy_stages_1_to_5(prepared):
    recipe, _ = prepared
    proc = run_recipe(recipe, "--stage", "1", "--stop_stage", "5", "--train_config", "conf/train_toy.yaml",
                      "--dir", "exp/toy run", "--average_num", "2", "--num_workers", "0", "--master_port", str(free_port()))
    units = {line.split()[0] for line in read_lines(recipe / "data" / "dict" / "units.txt")}
    assert {"楼", "市", "限", "购"} <= units and "▁" not in units
    exp = recipe / "exp" / "toy run"
    for mode in MODES:
        assert re.search(CER_LINE, (exp / "decode_test" / mode / "cer").read_text(), re.M)
    log = (exp / "log" / "rank0.log").read_text()
    assert "8 utterances trained, 0 skipped" in log and "(3 utterances)" in log  # every dev utterance in CV
    table = (exp / "decode_test" / "results.md").read_text()
    assert all(f"| {m} |" in table for m in MODES) and table in proc.stdout
