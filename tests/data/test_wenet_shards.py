"""WeNet shard lists: plain tar paths, indexed by a scan cached next to the list; the
converter between them and asrkit's indexed shard lists."""
from __future__ import annotations

import gzip
import hashlib
import io
import logging
import shutil
import tarfile

import pytest
import torch

from asrkit.data import wenet_shards as W
from asrkit.data.audio import load_audio
from asrkit.data.lists import ListError, read_list
from tests.data.audio_helpers import list_rows, tone, wenet_pairs, write_list, write_tar, write_wav, write_wenet_shards
from tests.helpers import run_tool


@pytest.fixture
def dev_rows(tiny_corpus):
    return list_rows(tiny_corpus.splits["dev"].data_list)


def test_wenet_tars_in_either_member_order_give_the_raw_lists_utterances(dev_rows, tmp_path):
    """Two tars, transcript-first (WeNet) and audio-first (asrkit): keys, transcripts,
    durations and samples equal those of a WeNet raw list (no durations) of the same files."""
    wenet_raw = write_list(tmp_path / "raw.list", [{k: r[k] for k in ("key", "wav", "txt")} for r in dev_rows])
    write_tar(tmp_path / "a.tar", wenet_pairs(dev_rows[:5]))
    write_tar(tmp_path / "b.tar", wenet_pairs(dev_rows[5:], audio_first=True))
    with tarfile.open(tmp_path / "a.tar") as a, tarfile.open(tmp_path / "b.tar") as b:
        firsts = a.getnames()[:2] + b.getnames()[:2]
    assert [n.rsplit(".", 1)[1] for n in firsts] == ["txt", "wav", "wav", "txt"]
    lst = tmp_path / "data.list"
    lst.write_text(f"{tmp_path / 'a.tar'}\n\n{tmp_path / 'b.tar'}\n")
    shard, raw = read_list(lst), read_list(wenet_raw)
    assert [(e.key, e.txt) for e in shard] == [(r["key"], r["txt"]) for r in dev_rows]
    assert [e.tar for e in shard] == [str(tmp_path / "a.tar")] * 5 + [str(tmp_path / "b.tar")] * 7
    for s, r in zip(shard, raw, strict=True):
        assert s.duration == pytest.approx(r.duration, abs=1e-6) and r.duration > 0.5
        (a, sr_a), (b, sr_b) = load_audio(s), load_audio(r)
        assert sr_a == sr_b and torch.equal(a, b), s.key


def test_members_without_a_pair_unsafe_or_unreadable_are_counted_logged_skips(tmp_path, caplog):
    wav = write_wav(tmp_path / "x.wav", tone(0.5)).read_bytes()
    link = tarfile.TarInfo("link.wav")
    link.type, link.linkname = tarfile.SYMTYPE, "a.wav"
    members = [("a.txt", b"one"), ("a.wav", wav), ("lonely.txt", b"two"), ("orphan.wav", wav),
               ("../evil.wav", wav), ("link.txt", b"six"), ("b.wav", wav), ("b.txt", b" nine \n"),
               ("b.spk", b"spk1"), ("README", b"hi"), ("b.txt", b"again"), ("bad.txt", b"\xff\xfe"),
               ("bad.wav", wav), ("junk.txt", b"oh"), ("junk.wav", b"RIFF not audio at all")]
    tar = write_tar(tmp_path / "s.tar", members)
    with tarfile.open(tar, "a") as t:  # a symbolic link member
        t.addfile(link)
    lst = tmp_path / "data.list"
    lst.write_text(f"{tar}\n")
    with caplog.at_level(logging.WARNING, logger="asrkit.data"):
        index = W.load_wenet_shard_list(lst)
    assert [(e.key, e.txt) for e in index.entries] == [("a", "one"), ("b", "nine")]
    assert index.skipped == {"unpaired_member": 5, "unsafe_tar_member": 2, "unknown_member": 2,
                             "duplicate_member": 1, "unreadable_text": 1, "unreadable_audio": 1}
    assert "12 tar member(s) skipped" in caplog.text and "lonely.txt (unpaired_member" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="asrkit.data"):
        assert W.load_wenet_shard_list(lst).skipped == index.skipped  # from the cache: logged again
    assert "12 tar member(s) skipped" in caplog.text


def test_a_truncated_tar_keeps_the_members_before_the_cut(dev_rows, tmp_path):
    tar = write_tar(tmp_path / "s.tar", wenet_pairs(dev_rows[:3]))
    with tarfile.open(tar) as t:
        second_wav = t.getmember(f"{dev_rows[1]['key']}.wav")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(tar.read_bytes()[:second_wav.offset_data + 100])
    lst = tmp_path / "data.list"
    lst.write_text(f"{cut}\n")
    index = W.load_wenet_shard_list(lst)
    assert [e.key for e in index.entries] == [dev_rows[0]["key"]]
    assert index.skipped == {"truncated_member": 1, "unpaired_member": 1}


def test_the_index_is_cached_once_reused_and_a_changed_tar_is_rescanned(dev_rows, tmp_path, monkeypatch):
    lst = write_wenet_shards(dev_rows, tmp_path / "shards", tmp_path / "data.list", per_tar=6)
    tars = lst.read_text().split()
    scanned = []
    scan = W.scan_tar
    monkeypatch.setattr(W, "scan_tar", lambda tar, *a: scanned.append(tar) or scan(tar, *a))
    first = W.load_wenet_shard_list(lst)
    cache = tmp_path / "data.list.index.json"
    assert first.cache_path == cache and scanned == tars and len(first.entries) == 12
    stamp = cache.stat().st_mtime_ns
    again = W.load_wenet_shard_list(lst)
    assert scanned == tars and cache.stat().st_mtime_ns == stamp  # no scan, no write
    assert again.entries == first.entries and again.digest == first.digest and again.cache_path == cache
    assert read_list(lst) == first.entries and scanned == tars  # read_list goes through the cache

    rows = [dict(r, txt="oh oh") if i == 1 else r for i, r in enumerate(dev_rows[6:])]
    write_tar(tmp_path / "new.tar", wenet_pairs(rows))
    shutil.move(tmp_path / "new.tar", tars[1])  # the second tar replaced: one transcript differs
    changed = W.load_wenet_shard_list(lst)
    assert scanned == tars + [tars[1]] and cache.stat().st_mtime_ns != stamp
    assert changed.entries[:6] == first.entries[:6] and changed.entries[6 + 1].txt == "oh oh"
    assert changed.digest != first.digest
    assert W.load_wenet_shard_list(lst).entries == changed.entries and len(scanned) == 3


def test_an_unwritable_list_folder_caches_in_the_experiment_folder(dev_rows, tmp_path, caplog):
    lst = write_wenet_shards(dev_rows[:4], tmp_path / "shards", tmp_path / "data" / "data.list", per_tar=2)
    (tmp_path / "data" / "data.list.index.json").mkdir()  # the cache next to the list cannot be written
    with caplog.at_level(logging.WARNING, logger="asrkit.data"):
        bare = W.load_wenet_shard_list(lst)
    assert bare.cache_path is None and "could not cache the shard index" in caplog.text
    exp = tmp_path / "exp"
    first = W.load_wenet_shard_list(lst, exp)
    [cache] = (exp / "shard_index").glob("data.list.*.index.json")
    assert first.cache_path == cache and first.scanned == 2 and first.entries == bare.entries
    again = W.load_wenet_shard_list(lst, exp)
    assert again.cache_path == cache and again.scanned == 0 and again.digest == first.digest


def test_refused_lines_and_tars_are_one_line_errors_naming_file_and_line(dev_rows, tmp_path):
    good = write_tar(tmp_path / "good.tar", wenet_pairs(dev_rows[:1]))
    gz = tmp_path / "packed.tar"
    gz.write_bytes(gzip.compress(good.read_bytes()))
    (tmp_path / "text.tar").write_text("not a tar at all\n" * 100)
    cases = [("https://host/shards/a.tar", "is a URL; asrkit reads local tars only"),
             ("shards/a.tar.gz", "is a compressed tar (by its suffix)"),
             (str(gz), "is a compressed tar (gzip data)"),
             (str(tmp_path / "nope.tar"), "nope.tar does not exist"),
             (str(tmp_path / "text.tar"), "is not a tar archive"),
             ('{"key": "a", "wav": "a.wav", "txt": "x"}', "a WeNet shard list holds one .tar path per line"),
             (str(tmp_path / "a.wav"), "a WeNet shard list holds one .tar path per line")]
    lst = tmp_path / "data.list"
    for line, message in cases:
        lst.write_text(f"{good}\n{line}\n")
        with pytest.raises(ListError) as e:
            read_list(lst)
        assert str(e.value).startswith(f"{lst}:2: ") and message in str(e.value) and "\n" not in str(e.value)
    # a JSON list with a tar path line keeps the JSON list's error
    lst.write_text(f'{{"key": "a", "wav": "a.wav", "txt": "x", "duration": 1}}\n{good}\n')
    with pytest.raises(ListError, match=f"{lst}:2: not valid JSON"):
        read_list(lst)


def test_an_unreadable_cache_is_ignored_and_rewritten(dev_rows, tmp_path, caplog):
    lst = write_wenet_shards(dev_rows[:2], tmp_path / "shards", tmp_path / "data.list", per_tar=2)
    first = W.load_wenet_shard_list(lst)
    first.cache_path.write_text(first.cache_path.read_text().replace('"offset": ', '"offset": -'))
    with caplog.at_level(logging.WARNING, logger="asrkit.data"):
        again = W.load_wenet_shard_list(lst)
    assert "ignoring a malformed shard index cache" in caplog.text and again.scanned == 1
    assert again.entries == first.entries and W.load_wenet_shard_list(lst).scanned == 0


@pytest.fixture(scope="module")
def asrkit_shards(tiny_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("convert")
    run_tool("make_shard_list.py", "--num_utts_per_shard", 5, tiny_corpus.splits["dev"].data_list, tmp / "tars",
             tmp / "shards.list")
    return tmp, tmp / "shards.list"


def test_converting_both_ways_round_trips(asrkit_shards):
    tmp, asrkit_list = asrkit_shards
    run_tool("convert_shard_list.py", "--to", "wenet", asrkit_list, tmp / "wenet.list")
    tars = (tmp / "wenet.list").read_text().splitlines()
    assert tars == [str(tmp / "tars" / f"shards_00000{i}.tar") for i in range(3)]
    assert read_list(tmp / "wenet.list") == read_list(asrkit_list)  # keys, texts, durations, offsets
    run_tool("convert_shard_list.py", "--to", "asrkit", tmp / "wenet.list", tmp / "back.list")
    assert (tmp / "back.list").read_text() == asrkit_list.read_text()
    digest = W.load_wenet_shard_list(tmp / "wenet.list").digest
    assert hashlib.sha256((tmp / "back.list").read_bytes()).hexdigest() == digest


def test_converter_bad_input_is_one_line_and_status_2(asrkit_shards, tiny_corpus):
    tmp, asrkit_list = asrkit_shards
    raw = tiny_corpus.splits["dev"].data_list
    cases = [("wenet", raw, "is a raw list, not a shard list"),
             ("asrkit", asrkit_list, "is not a WeNet shard list"),
             ("asrkit", tmp / "missing.list", "No such file or directory")]
    for to, src, message in cases:
        proc = run_tool("convert_shard_list.py", "--to", to, src, tmp / "out.list", check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.splitlines() == [proc.stderr.strip()] and message in proc.stderr
    assert not (tmp / "out.list").exists()


def test_tar_member_reads_accept_other_audio_extensions(tmp_path):
    """A FLAC member is read by seek like a WAV one (WeNet's audio extensions)."""
    import soundfile
    buf = io.BytesIO()
    soundfile.write(buf, tone(0.7), 16000, format="FLAC")
    tar = write_tar(tmp_path / "s.tar", [("f1.txt", b"one"), ("f1.flac", buf.getvalue())])
    lst = tmp_path / "data.list"
    lst.write_text(f"{tar}\n")
    [entry] = read_list(lst)
    wav, sr = load_audio(entry)
    assert entry.duration == pytest.approx(0.7, abs=1e-4) and sr == 16000 and wav.shape == (1, 11200)
