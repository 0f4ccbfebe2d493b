"""tools/prepare_fsdd.py on the shipped real speech (corpora/fsdd): splits by speaker, isolated
takes and connected utterances made of one speaker's takes (the samples themselves, joined by
0.1-0.3 s of silence), seeded per speaker, bad input in one line."""
from __future__ import annotations

import tarfile

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import REPO, run_tool

ARCHIVE = REPO / "corpora" / "fsdd" / "recordings.tar.gz"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdd")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(root, filter="data")
    return root


def kaldi(path):
    return dict(line.rstrip("\n").split(" ", 1) for line in path.read_text(encoding="utf-8").splitlines())


def test_sets_split_by_speaker_with_connected_utterances_of_one_speakers_takes(corpus, tmp_path):
    out = tmp_path / "data"
    run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", out, "--test_speakers", "lucas",
             "--dev_speakers", "nicolas", "--connected", "3")
    speakers = {name: set(kaldi(out / name / "utt2spk").values())
                for name in ("train", "dev", "dev_connected", "test", "test_connected")}
    assert speakers == {"train": {"george", "jackson"}, "dev": {"nicolas"}, "dev_connected": {"nicolas"},
                        "test": {"lucas"}, "test_connected": {"lucas"}}
    test = kaldi(out / "test" / "text")
    assert len(test) == 500 and test["lucas-7-32"] == "seven" and kaldi(out / "test" / "wav.scp")["lucas-7-32"] \
        .endswith("recordings/7_lucas_32.flac")
    assert len(kaldi(out / "train" / "text")) == 2 * 500 + 2 * 3
    texts, scp, takes = (kaldi(out / "test_connected" / f) for f in ("text", "wav.scp", "takes"))
    assert sorted(texts) == ["lucas-c0000", "lucas-c0001", "lucas-c0002"]
    for key, words in texts.items():
        files = takes[key].split()
        assert 3 <= len(files) <= 7 and len(set(files)) == len(files)
        assert words.split() == [["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                  "nine"][int(f[0])] for f in files]
        joined, rate = sf.read(scp[key], dtype="int16")
        assert rate == 8000
        parts = [sf.read(corpus / "recordings" / f, dtype="int16")[0] for f in files]
        at = 0  # each take's samples in order, after 0.1-0.3 s of digital silence
        for part in parts:
            start = at + int(np.flatnonzero(joined[at:])[0])
            gap = start - at
            assert 0.1 * rate - 1 <= gap - int(np.flatnonzero(part)[0]) <= 0.3 * rate
            start -= int(np.flatnonzero(part)[0])
            assert np.array_equal(joined[start:start + part.size], part)
            at = start + part.size
        assert 0.1 * rate - 1 <= joined.size - at <= 0.3 * rate


def test_a_speakers_utterances_do_not_depend_on_the_other_speakers(corpus, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", a, "--test_speakers", "lucas",
             "--dev_speakers", "nicolas", "--connected", "2")
    run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", b, "--test_speakers", "george",
             "--dev_speakers", "lucas", "--train_speakers", "jackson", "--connected", "2")
    assert kaldi(a / "test_connected" / "takes") == kaldi(b / "dev_connected" / "takes")
    assert (a / "test_connected" / "audio" / "lucas-c0001.flac").read_bytes() == \
        (b / "dev_connected" / "audio" / "lucas-c0001.flac").read_bytes()
    assert set(kaldi(b / "train" / "utt2spk").values()) == {"jackson"}


def test_bad_splits_and_names_are_one_line_and_status_2(corpus, tmp_path):
    twice = run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", tmp_path / "x", "--test_speakers", "lucas",
                     "--dev_speakers", "lucas", check=False)
    assert twice.returncode == 2 and twice.stderr.strip().splitlines() == [
        "error: speaker(s) lucas named in two splits: every speaker belongs to one split"]
    unknown = run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", tmp_path / "x", "--test_speakers", "theo",
                       "--dev_speakers", "lucas", check=False)
    assert unknown.returncode == 2 and "no recordings of theo (speakers there: george, jackson, lucas, nicolas)" \
        in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
    empty = run_tool("prepare_fsdd.py", "--corpus_dir", tmp_path, "--out", tmp_path / "x", "--test_speakers", "a",
                     "--dev_speakers", "b", check=False)
    assert empty.returncode == 2 and "no <digit>_<speaker>_<take>.wav or .flac recordings" in empty.stderr


def test_without_test_or_dev_speakers_every_speaker_trains_and_no_empty_set_is_written(corpus, tmp_path):
    """The digits recipe's preparation (all shipped speakers train): only ``train`` is written."""
    out = tmp_path / "all"
    run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", out, "--connected", "1")
    assert sorted(p.name for p in out.iterdir()) == ["train"]
    speakers = {line.split()[1] for line in (out / "train" / "utt2spk").read_text().splitlines()}
    assert speakers == {"george", "jackson", "lucas", "nicolas"}


def test_max_takes_keeps_each_speakers_first_takes_of_each_digit(corpus, tmp_path):
    out = tmp_path / "few"
    run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", out, "--test_speakers", "lucas",
             "--train_speakers", "george", "--connected", "2", "--max_takes", "2")
    test = sorted(kaldi(out / "test" / "text"))
    assert test == [f"lucas-{d}-{t:02d}" for d in range(10) for t in (0, 1)]
    assert len(kaldi(out / "train" / "text")) == 20 + 2
    used = {name for line in (out / "train" / "takes").read_text().splitlines() for name in line.split()[1:]}
    assert used and all(name.split("_")[2].split(".")[0] in ("0", "1") for name in used)
    bad = run_tool("prepare_fsdd.py", "--corpus_dir", corpus, "--out", out, "--max_takes", "0", check=False)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
