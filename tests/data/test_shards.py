"""Shards: make_shard_list packs a raw list; members read back bit-identically."""
import json
import tarfile

import numpy as np
import pytest
import soundfile
import torch

from asrkit.data.lists import read_list
from asrkit.data.processors import Skip, build_sample_processor
from tests.data.audio_helpers import AUGMENT_ALL, config, tokenizer_for, tone, write_list, write_wav
from tests.helpers import run_tool


@pytest.fixture(scope="module")
def packed(tiny_corpus, tiny_units, tmp_path_factory):
    """A raw list of 9 corpus utterances plus a segment, a stereo float file, an 8 kHz
    FLAC file and a missing file, packed 4 per tar."""
    tmp = tmp_path_factory.mktemp("shards")
    rows = [json.loads(r) for r in tiny_corpus.splits["dev"].data_list.read_text().splitlines()[:9]]
    long_wav = rows[0]["wav"]
    rows.insert(2, {"key": "seg", "wav": long_wav, "txt": "two", "start": 0.3, "end": 1.1})
    stereo = np.stack([tone(1.2), tone(1.2, 700, seed=2)], axis=1)
    rows.append({"key": "stereo", "wav": str(write_wav(tmp / "st.wav", stereo, subtype="FLOAT")), "txt": "six"})
    soundfile.write(str(tmp / "r8.flac"), tone(1.0, sr=8000), 8000, subtype="PCM_16")
    rows.append({"key": "flac8k", "wav": str(tmp / "r8.flac"), "txt": "one"})
    rows.insert(5, {"key": "gone", "wav": str(tmp / "gone.wav"), "txt": "one", "duration": 1.0})
    raw = write_list(tmp / "raw.list", rows)
    proc = run_tool("make_shard_list.py", "--num_utts_per_shard", 4, "--num_threads", 2, raw, tmp / "tars",
                    tmp / "shards.list")
    return tmp, raw, proc.stderr, tiny_units


def test_unwritable_shard_is_a_one_line_error_and_keeps_the_old_list(tiny_corpus, tmp_path):
    raw = tiny_corpus.splits["dev"].data_list
    (tmp_path / "tars" / "shards_000001.tar").mkdir(parents=True)  # the second tar cannot be written
    shard_list = tmp_path / "shards.list"
    shard_list.write_text("old\n")
    proc = run_tool("make_shard_list.py", "--num_utts_per_shard", 8, raw, tmp_path / "tars", shard_list,
                    check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(
        f"error: could not write {tmp_path / 'tars' / 'shards_000001.tar'}: IsADirectoryError")
    assert shard_list.read_text() == "old\n"
    assert sorted(p.name for p in (tmp_path / "tars").iterdir()) == ["shards_000000.tar", "shards_000001.tar"]


def test_shard_list_records_members_and_skips(packed):
    tmp, raw, log, _ = packed
    raw_entries = [e for e in read_list(raw) if e.key != "gone"]
    shard_entries = read_list(tmp / "shards.list")
    assert [e.key for e in shard_entries] == [e.key for e in raw_entries]
    assert "1 skipped: 1 missing_file" in log and "gone" in log
    lines = [json.loads(x) for x in (tmp / "shards.list").read_text().splitlines()]
    assert [len(x["members"]) for x in lines] == [4, 3, 4, 1]  # 'gone' left out of the 2nd tar
    for r, s in zip(raw_entries, shard_entries):
        assert s.tar and s.wav is None and s.txt == r.txt
        assert s.duration == pytest.approx(r.duration, abs=1e-3)
    with tarfile.open(lines[0]["tar"]) as tar:
        names = tar.getnames()
        first = lines[0]["members"][0]
        assert names[:2] == [first["key"] + ".wav", first["key"] + ".txt"]
        assert tar.extractfile(names[1]).read().decode() == first["txt"]


def test_raw_and_shard_give_bit_identical_augmented_features(packed):
    tmp, raw, _, units = packed
    cfg = config(units, **AUGMENT_ALL)
    proc = build_sample_processor(cfg.dataset_conf, tokenizer_for(units), train=True, seed=3)
    raw_entries = [e for e in read_list(raw) if e.key != "gone"]
    shard_entries = read_list(tmp / "shards.list")
    for epoch in (0, 1):
        for r, s in zip(raw_entries, shard_entries, strict=True):
            a, b = proc(r, epoch), proc(s, epoch)
            assert not isinstance(a, Skip) and not isinstance(b, Skip), (a, b)
            assert torch.equal(a["wav"], b["wav"]), r.key
            assert torch.equal(a["feat"], b["feat"]) and a["tokens"] == b["tokens"], r.key


def test_stale_or_truncated_shards_are_counted_skips(packed, tmp_path):
    tmp, _, _, units = packed
    lines = [json.loads(x) for x in (tmp / "shards.list").read_text().splitlines()]
    shard = lines[0]
    stale = dict(shard, members=[dict(shard["members"][0], offset=shard["members"][1]["offset"],
                                      size=shard["members"][1]["size"])])
    data = open(shard["tar"], "rb").read()
    cut = tmp_path / "cut.tar"
    last = shard["members"][-1]
    cut.write_bytes(data[: last["offset"] + last["size"] // 2])
    broken = [stale, {"tar": str(cut), "members": [last]},
              {"tar": str(tmp_path / "none.tar"), "members": [dict(last, key="gone")]}]  # (keys are unique)
    write_list(tmp_path / "broken.list", broken)
    cfg = config(units)
    proc = build_sample_processor(cfg.dataset_conf, tokenizer_for(units), train=False, seed=0)
    reasons = [proc(e, 0).reason for e in read_list(tmp_path / "broken.list")]
    assert reasons == ["shard_mismatch", "truncated_audio", "missing_file"]


@pytest.mark.parametrize("line, why", [
    ('{"key": "a", "wav": "a.wav", "txt": "one", "duration": 1}', "{}: duplicate key 'a' at line 1 and line 2"),
    ('{"key": "b", "wav": "b.wav"', "{}:2: not valid JSON")])
def test_a_list_the_reader_refuses_is_one_error_and_status_2_nothing_written(tmp_path, capsys, line, why):
    from tools import make_shard_list
    raw = tmp_path / "raw.list"
    raw.write_text('{"key": "a", "wav": "a.wav", "txt": "one", "duration": 1}\n' + line + "\n")
    with pytest.raises(SystemExit) as exit_info:
        make_shard_list.main([str(raw), str(tmp_path / "tars"), str(tmp_path / "shards.list")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"error: {why.format(raw)}" in err and "Traceback" not in err
    assert not (tmp_path / "tars").exists() and not (tmp_path / "shards.list").exists()
