"""The per-sample chain: skips, determinism, train/eval behaviour, collate."""
import functools
import json
import logging

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from asrkit.data import processors
from asrkit.data.audio import load_audio
from asrkit.data.features import compute_fbank
from asrkit.data.lists import read_list
from asrkit.data.processors import Skip, SkipStats, build_sample_processor, collate, sample_generator
from tests.data.audio_helpers import AUGMENT_ALL, config, tokenizer_for, tone, write_list, write_wav


@pytest.fixture(scope="module")
def dev(tiny_corpus):
    return read_list(tiny_corpus.splits["dev"].data_list)


def processor(units, train=True, seed=0, **dataset_conf):
    cfg = config(units, **dataset_conf)
    return build_sample_processor(cfg.dataset_conf, tokenizer_for(units), train=train, seed=seed)


def test_mixed_good_and_bad_list_yields_all_good_and_counts_each_bad_kind(tmp_path, tiny_units, dev, caplog):
    good = [{"key": e.key, "wav": e.wav, "txt": e.txt} for e in dev[:4]]
    good.append({"key": "rate8k", "wav": str(write_wav(tmp_path / "r8.wav", tone(1.0, sr=8000), sr=8000)),
                 "txt": "one two"})
    stereo = np.stack([tone(1.0), tone(1.0, 600, seed=3)], axis=1)
    good.append({"key": "stereo", "wav": str(write_wav(tmp_path / "st.wav", stereo)), "txt": "nine"})
    ok = str(write_wav(tmp_path / "ok.wav", tone(1.0)))
    cut = write_wav(tmp_path / "cut.wav", tone(1.0)).read_bytes()
    (tmp_path / "cut.wav").write_bytes(cut[:9000])
    (tmp_path / "junk.wav").write_bytes(b"RIFF----junk" * 50)
    bad = {
        "missing_file": {"wav": str(tmp_path / "nowhere.wav"), "txt": "one"},
        "unreadable_audio": {"wav": str(tmp_path / "junk.wav"), "txt": "one"},
        "truncated_audio": {"wav": str(tmp_path / "cut.wav"), "txt": "one"},
        "empty_audio": {"wav": str(write_wav(tmp_path / "empty.wav", np.zeros(0, np.float32))), "txt": "one"},
        "empty_transcript": {"wav": ok, "txt": "  "},
        "untokenizable_transcript": {"wav": ok, "txt": "我我"},
        "too_long": {"wav": str(write_wav(tmp_path / "long.wav", tone(6.0))), "txt": "one"},
        "too_short": {"wav": str(write_wav(tmp_path / "short.wav", tone(0.05))), "txt": "one"},
        "too_many_tokens": {"wav": ok, "txt": " ".join(["seven"] * 30)},
    }
    rows = good[:3] + [{"key": f"bad_{k}", **v} for k, v in bad.items()] + good[3:]
    entries = read_list(write_list(tmp_path / "data.list", rows))
    proc = processor(tiny_units, filter_conf={"max_length": 500, "token_max_length": 100}, **AUGMENT_ALL)
    stats = SkipStats()
    samples = []
    with caplog.at_level(logging.WARNING, logger="asrkit.data"):
        for epoch in (0, 1):
            stats.reset()
            out = [proc(e, epoch) for e in entries]
            for item in out:
                if isinstance(item, Skip):
                    stats.add(item)
            samples = [s for s in out if not isinstance(s, Skip)]
            assert [s["key"] for s in samples] == [r["key"] for r in good]
            assert stats.counts == {reason: 1 for reason in bad}
    assert all(s["sample_rate"] == 16000 and s["wav"].shape[0] == 1 for s in samples)
    for reason in bad:  # each bad key logged once over both epochs
        assert caplog.text.count(f"skipped bad_{reason} ({reason})") == 1
    assert stats.summary().startswith(f"{len(bad)} skipped: 1 empty_audio")


def test_programming_error_inside_a_processor_is_not_swallowed(tiny_units, dev):
    proc = processor(tiny_units)
    broken = functools.partial(processors.filter_lengths, max_length="1000", min_length=0, token_max_length=9,
                               token_min_length=0, min_output_input_ratio=0, max_output_input_ratio=1)
    proc.steps.insert(1, broken)  # a str where a number belongs: comparing raises TypeError
    with pytest.raises(TypeError):
        proc(dev[0], 0)


def test_augmentation_depends_only_on_seed_epoch_and_key(tiny_units, dev):
    a, b = processor(tiny_units, seed=7, **AUGMENT_ALL), processor(tiny_units, seed=7, **AUGMENT_ALL)
    first = a(dev[0], 3)
    assert torch.equal(first["feat"], b(dev[0], 3)["feat"])
    assert torch.equal(first["feat"], a(dev[0], 3)["feat"])  # no hidden state between calls
    assert not torch.equal(first["feat"], a(dev[0], 4)["feat"])
    assert not torch.equal(first["feat"], processor(tiny_units, seed=8, **AUGMENT_ALL)(dev[0], 3)["feat"])


def test_eval_chain_is_plain_fbank_and_ignores_seed(tiny_units, dev):
    ev1 = processor(tiny_units, train=False, seed=1, **AUGMENT_ALL)
    ev2 = processor(tiny_units, train=False, seed=2, **AUGMENT_ALL)
    s = ev1(dev[1], 0)
    wav, sr = load_audio(dev[1])
    plain = compute_fbank(wav, sr, num_mel_bins=80, frame_length=25.0, frame_shift=10.0)
    assert torch.equal(s["feat"], plain) and torch.equal(ev2(dev[1], 5)["feat"], plain)
    tok = tokenizer_for(tiny_units)
    assert s["tokens"] == tok.encode(dev[1].txt) and tok.decode(s["tokens"]) == dev[1].txt


def test_dataset_cmvn_is_applied(tmp_path, tiny_units, dev):
    (tmp_path / "cmvn.json").write_text(json.dumps({"mean_stat": [10.0] * 80, "var_stat": [104.0] * 80,
                                                    "frame_num": 1}))
    plain = processor(tiny_units, train=False)(dev[0], 0)["feat"]
    normed = processor(tiny_units, train=False, cmvn_file=str(tmp_path / "cmvn.json"))(dev[0], 0)["feat"]
    torch.testing.assert_close(normed, (plain - 10.0) / 2.0)


class _Items(Dataset):
    def __init__(self, proc, entries, epoch):
        self.proc, self.entries, self.epoch = proc, entries, epoch

    def __len__(self):
        return len(self.entries)

    def __getitem__(self, i):
        return self.proc(self.entries[i], self.epoch)


def test_same_features_from_dataloader_workers_as_in_process(tiny_units, dev):
    """Workers draw from their own global RNG streams; the features must not change."""
    proc = processor(tiny_units, seed=11, **AUGMENT_ALL)
    entries = dev[:8]
    loader = DataLoader(_Items(proc, entries, 2), batch_size=3, num_workers=2, collate_fn=proc.collate)
    batches = list(loader)
    expected = [proc.collate([proc(e, 2) for e in entries[i:i + 3]]) for i in range(0, 8, 3)]
    for got, want in zip(batches, expected, strict=True):
        assert got["keys"] == want["keys"]
        for name in ("feats", "feats_lengths", "target", "target_lengths"):
            assert torch.equal(got[name], want[name]), name


def test_sample_generator_is_stable():
    draw = lambda g: torch.randint(1 << 30, (3,), generator=g).tolist()  # noqa: E731
    assert draw(sample_generator(1, 2, "utt")) == draw(sample_generator(1, 2, "utt"))
    assert draw(sample_generator(1, 2, "utt")) != draw(sample_generator(1, 3, "utt"))
    assert draw(sample_generator(1, 2, "utt")) != draw(sample_generator(2, 2, "utt"))
    assert draw(sample_generator(0, 0, "a")) == [43247052, 147575421, 313158963]  # pinned: same in every process


def test_collate_pads_and_separates_skips():
    s1 = {"key": "a", "feat": torch.ones(3, 4), "tokens": [5, 6]}
    s2 = {"key": "b", "feat": torch.full((5, 4), 2.0), "tokens": [7]}
    skip = Skip("c", "missing_file", "gone")
    b = collate([s1, skip, s2])
    assert b["keys"] == ["a", "b"] and b["skipped"] == [skip]
    assert b["feats"].shape == (2, 5, 4) and b["feats"].dtype == torch.float32
    assert b["feats"][0, 3:].abs().sum() == 0 and torch.equal(b["feats"][1], s2["feat"])
    assert b["feats_lengths"].tolist() == [3, 5] and b["feats_lengths"].dtype == torch.int64
    assert b["target"].tolist() == [[5, 6], [7, -1]] and b["target"].dtype == torch.int64
    assert b["target_lengths"].tolist() == [2, 1]
    empty = collate([], feat_dim=40)
    assert empty["feats"].shape == (0, 0, 40) and empty["target"].shape == (0, 0)
    assert empty["feats_lengths"].shape == (0,) and empty["feats_lengths"].dtype == torch.int64
    assert collate([skip])["feats"].shape == (0, 0, 80)
    with pytest.raises(ValueError, match="F=4"):
        collate([s1, {"key": "d", "feat": torch.ones(2, 3), "tokens": [1]}])
