import json
import logging

import pytest

from asrkit.data.lists import ListEntry, ListError, read_list, read_wav_scp, write_shard_list
from tests.data.audio_helpers import tone, write_list, write_wav


def test_raw_list_durations_segments_and_measuring(tmp_path):
    a = write_wav(tmp_path / "a.wav", tone(1.25))
    rows = [{"key": "a", "wav": str(a), "txt": "one", "duration": 9.0},          # trusted as given
            {"key": "b", "wav": str(a), "txt": "two"},                            # measured: 1.25
            {"key": "c", "wav": str(a), "txt": "oh", "start": 0.25, "end": 1.0},  # segment: 0.75
            {"key": "d", "wav": str(a), "txt": "six", "start": 0.5}]              # to the end: 0.75
    entries = read_list(write_list(tmp_path / "data.list", rows))
    assert [e.duration for e in entries] == [9.0, 1.25, 0.75, 0.75]
    assert entries[2] == ListEntry(key="c", txt="oh", duration=0.75, wav=str(a), start=0.25, end=1.0)
    assert not any(e.is_shard_member for e in entries)


def test_unmeasurable_entry_is_kept_with_zero_duration_and_a_warning(tmp_path, caplog):
    path = write_list(tmp_path / "data.list", [{"key": "gone", "wav": str(tmp_path / "no.wav"), "txt": "x"}])
    with caplog.at_level(logging.WARNING, logger="asrkit.data"):
        entries = read_list(path)
    assert entries[0].duration == 0.0 and "gone" in caplog.text


def test_shard_list_is_flattened_in_tar_order(tmp_path):
    members = [ListEntry("k1", "one", 1.5, tar="s0.tar", offset=512, size=100),
               ListEntry("k2", "two", 0.5, tar="s0.tar", offset=1536, size=90)]
    write_shard_list(tmp_path / "shards.list", [("s0.tar", members), ("s1.tar", [])])
    raw = write_list(tmp_path / "mixed.list", [{"key": "r", "wav": "r.wav", "txt": "x", "duration": 1.0}])
    assert read_list(tmp_path / "shards.list") == members
    text = (tmp_path / "shards.list").read_text() + raw.read_text()
    (tmp_path / "both.list").write_text(text)
    assert [e.key for e in read_list(tmp_path / "both.list")] == ["k1", "k2", "r"]


@pytest.mark.parametrize("line, match", [
    ('{"key": "a", "wav": "a.wav", "txt": "x"', "not valid JSON"),
    ('["a"]', "JSON object"),
    ('{"wav": "a.wav"}', "neither"),
    ('{"key": "a", "txt": "x", "duration": 1}', "missing field 'wav'"),
    ('{"key": "a", "wav": "a.wav", "txt": 3, "duration": 1}', "'txt' must be str"),
    ('{"key": "a", "wav": "a.wav", "txt": "x", "start": 2, "end": 1}', "end 1 <= start 2"),
    ('{"tar": "s.tar", "members": [{"key": "a", "txt": "x", "duration": 1, "offset": 512}]}', "'size'"),
    ('{"tar": "s.tar", "members": [{"key": "a", "txt": "x", "duration": 1, "offset": 7, "size": 1}]}',
     "out of range"),
])
def test_malformed_lines_name_file_and_line(tmp_path, line, match):
    path = tmp_path / "bad.list"
    path.write_text('{"key": "ok", "wav": "ok.wav", "txt": "x", "duration": 1}\n\n' + line + "\n")
    with pytest.raises(ListError, match=match) as err:
        read_list(path)
    assert f"{path}:3" in str(err.value)


def test_wav_scp_reader(tmp_path):
    (tmp_path / "wav.scp").write_text("a /x/a b.wav\nb rel/b.wav\n")
    assert read_wav_scp(tmp_path / "wav.scp") == {"a": "/x/a b.wav", "b": "rel/b.wav"}
    (tmp_path / "pipe.scp").write_text("a sox x.wav -t wav - |\n")
    with pytest.raises(ListError, match="pipe"):
        read_wav_scp(tmp_path / "pipe.scp")
    (tmp_path / "dup.scp").write_text("a x.wav\na y.wav\n")
    with pytest.raises(ListError, match="dup.scp:2: duplicate"):
        read_wav_scp(tmp_path / "dup.scp")


def test_json_written_by_make_raw_list_is_read(tiny_corpus):
    split = tiny_corpus.splits["dev"]
    rows = [json.loads(r) for r in split.data_list.read_text().splitlines()]
    entries = read_list(split.data_list)
    assert [(e.key, e.txt, e.duration, e.wav) for e in entries] == \
        [(r["key"], r["txt"], r["duration"], r["wav"]) for r in rows]


# ----------------------------------------------------------------------------- keys and transcripts


def test_a_repeated_key_is_refused_naming_the_file_the_key_and_both_lines(tmp_path):
    """Raw lines, shard members and WeNet shard tars alike: the first repeat is refused,
    with the lines of both entries (results, scores and per-key seeds are matched by key)."""
    raw = [{"key": k, "wav": "x.wav", "txt": "one", "duration": 1.0} for k in ("a", "b", "c", "b")]
    path = write_list(tmp_path / "raw.list", raw)
    with pytest.raises(ListError) as err:
        read_list(path)
    assert str(err.value).startswith(f"{path}: duplicate key 'b' at line 2 and line 4:"), err.value
    members = [ListEntry("k1", "one", 1.5, tar="s0.tar", offset=512, size=100),
               ListEntry("k2", "two", 0.5, tar="s0.tar", offset=1536, size=90)]
    write_shard_list(tmp_path / "shards.list", [("s0.tar", members), ("s1.tar", members[1:])])
    with pytest.raises(ListError, match=r"shards.list: duplicate key 'k2' at line 1 \(member 1\) and line 2 "
                                        r"\(member 0\)"):
        read_list(tmp_path / "shards.list")


def test_a_wenet_shard_list_repeating_a_key_or_a_tar_is_refused_naming_the_lines(tmp_path):
    from tests.data.audio_helpers import write_tar
    wav = write_wav(tmp_path / "a.wav", tone(0.3)).read_bytes()
    one = write_tar(tmp_path / "one.tar", [("u1.txt", b"one"), ("u1.wav", wav), ("u2.txt", b"two"), ("u2.wav", wav)])
    two = write_tar(tmp_path / "two.tar", [("u3.txt", b"six"), ("u3.wav", wav), ("u2.txt", b"two"), ("u2.wav", wav)])
    empty = write_tar(tmp_path / "empty.tar", [])
    (tmp_path / "keys.list").write_text(f"{one}\n{empty}\n{two}\n")
    with pytest.raises(ListError, match=rf"duplicate key 'u2' at line 1 \(tar {one}\) and line 3 \(tar {two}\)"):
        read_list(tmp_path / "keys.list")
    (tmp_path / "twice.list").write_text(f"{one}\n{one}\n")
    with pytest.raises(ListError, match=rf"duplicate key 'u1' at line 1 \(tar {one}\) and line 2 \(tar {one}\)"):
        read_list(tmp_path / "twice.list")


@pytest.mark.parametrize("key, problem", [
    ("", "is empty"), ("a b", "holds whitespace (' ' at position 1)"), ("a\tb", "holds whitespace ('\\t'"),
    ("new\nline", "holds whitespace ('\\n'"), ("nb\u00a0sp", "holds whitespace"),
    ("bell\x07", "holds a control character ('\\x07' at position 4)")])
def test_a_key_that_is_not_a_kaldi_token_is_refused_naming_the_line(tmp_path, key, problem):
    rows = [{"key": "ok", "wav": "ok.wav", "txt": "x", "duration": 1}, {"key": key, "wav": "a.wav", "txt": "x"}]
    path = write_list(tmp_path / "data.list", rows)
    with pytest.raises(ListError) as err:
        read_list(path)
    assert str(err.value).startswith(f"{path}: line 2: key {key!r} {problem}"), err.value
    assert "\n" not in str(err.value)


def test_keys_wenet_accepts_are_read():
    """Anything but whitespace and control characters: paths, dots, dashes, non-ASCII."""
    from asrkit.data.list_entries import key_problem
    for key in ("spk1/utt-01.2", "BAC009S0002W0122", "中文_01", "a:b=c,d", "é#%&'\"()*+@[]{}~"):
        assert key_problem(key) is None, key


def test_txt_may_be_left_out_only_when_the_reader_is_told_so(tmp_path):
    rows = [{"key": "a", "wav": "a.wav", "duration": 1}, {"key": "b", "wav": "b.wav", "txt": None, "duration": 1},
            {"key": "c", "wav": "c.wav", "txt": "", "duration": 1}]
    path = write_list(tmp_path / "data.list", rows)
    with pytest.raises(ListError, match=f"{path}:1: missing field 'txt'"):
        read_list(path)
    assert [e.txt for e in read_list(path, require_txt=False)] == [None, None, ""]
