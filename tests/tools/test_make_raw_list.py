"""tools/make_raw_list.py: wav.scp + text -> data.list."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers import run_tool


def test_list_matches_corpus_with_durations(tiny_corpus):
    split = tiny_corpus.splits["dev"]
    entries = [json.loads(line) for line in split.data_list.read_text().splitlines()]
    texts = dict(line.split(maxsplit=1) for line in split.text.read_text().splitlines())
    assert {e["key"]: e["txt"] for e in entries} == texts
    for e in entries:
        assert set(e) == {"key", "wav", "txt", "duration"} and 0.3 < e["duration"] < 8


def test_pipe_entries_refused_naming_the_line(tmp_path):
    (tmp_path / "wav.scp").write_text("a /x/a.wav\nb sox /x/b.wav -t wav - |\n")
    (tmp_path / "text").write_text("a one\nb two\n")
    proc = run_tool("make_raw_list.py", tmp_path / "wav.scp", tmp_path / "text", tmp_path / "data.list",
                    check=False)
    assert proc.returncode == 1
    assert "wav.scp:2: shell pipe entries are not supported" in proc.stderr
    assert not (tmp_path / "data.list").exists()


def test_unwritable_output_is_a_one_line_error_and_leaves_the_target(tmp_path, tiny_corpus):
    split = tiny_corpus.splits["dev"]
    target = tmp_path / "data.list"
    target.mkdir()  # a directory cannot be replaced by the list
    (target / "keep").write_text("old")
    proc = run_tool("make_raw_list.py", split.wav_scp, split.text, target, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"error: could not write {target}: IsADirectoryError")
    assert (target / "keep").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.list"]  # no temporary left


def test_paths_with_spaces_segments_and_counted_skips(tmp_path, tiny_corpus):
    src = tiny_corpus.splits["test"]
    folder = tmp_path / "my audio"
    folder.mkdir()
    keys = [line.split()[0] for line in src.wav_scp.read_text().splitlines()][:3]
    for k in keys:
        shutil.copy(src.dir / "wav" / f"{k}.wav", folder / f"{k} copy.wav")
    (folder / "broken.wav").write_bytes(b"RIFF0000WAVEjunk")
    scp = "".join(f"{k} {folder / (k + ' copy.wav')}\n" for k in keys)
    scp += f"broken {folder / 'broken.wav'}\nnotext {folder / (keys[0] + ' copy.wav')}\n"
    (tmp_path / "wav.scp").write_text(scp)
    (tmp_path / "text").write_text("".join(f"{k} one two\n" for k in keys) + "broken one\norphan two\n")
    proc = run_tool("make_raw_list.py", tmp_path / "wav.scp", tmp_path / "text", tmp_path / "out dir" / "data.list")
    entries = [json.loads(line) for line in (tmp_path / "out dir" / "data.list").read_text().splitlines()]
    assert [e["key"] for e in entries] == keys and all(" copy.wav" in e["wav"] for e in entries)
    assert "skipped 3 utterance(s): 1 no audio in wav.scp, 1 no transcript, 1 unreadable audio" in proc.stderr
    strict = run_tool("make_raw_list.py", tmp_path / "wav.scp", tmp_path / "text", tmp_path / "s.list",
                      "--strict", check=False)
    assert strict.returncode == 1

    (tmp_path / "segments").write_text(f"{keys[0]}-seg1 {keys[0]} 0.10 0.60\n")
    (tmp_path / "text2").write_text(f"{keys[0]}-seg1 one\n")
    run_tool("make_raw_list.py", tmp_path / "wav.scp", tmp_path / "text2", tmp_path / "seg.list",
             "--segments", tmp_path / "segments")
    (seg,) = [json.loads(line) for line in (tmp_path / "seg.list").read_text().splitlines()]
    assert seg["start"] == pytest.approx(0.1) and seg["end"] == pytest.approx(0.6)
    assert seg["duration"] == pytest.approx(0.5)
