"""The per-rank loader with real DataLoader workers: equal batch counts, coverage, epochs,
resume (asrkit.data.dataset.build_dataloader).

The matrix tests use :class:`EchoProcessor`, which reads no audio, so that many worlds fit
the time budget; the resume and CV tests use the real sample processor on real audio.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.data.dataset import build_dataloader
from asrkit.data.lists import ListEntry, read_list, write_shard_list
from asrkit.data.processors import collate
from tests.data.audio_helpers import real_setup
from tests.helpers import run_tool


def loader_conf(mode="static", **dataset_conf):
    """A validated ``dataset_conf`` with small batches in ``mode`` plus the given keys."""
    batch_conf = {"batch_type": mode, "batch_size": 4, "max_frames_in_batch": 800,
                  "bucket_boundaries": [150, 250], "bucket_batch_sizes": [5, 3, 2]}
    raw = {"shuffle_conf": {"shuffle_size": 20}, "sort_conf": {"sort_size": 10}, "batch_conf": batch_conf}
    raw.update(dataset_conf)
    return build(TrainConfig, {"dataset_conf": raw}).dataset_conf


def metadata_list(tmp_path: Path, n: int, kind: str, seed: int = 0) -> list[ListEntry]:
    """``n`` entries (0.5-3.5 s) read back from a written raw list or a 6-member-tar shard
    list.  The audio paths do not exist: use with :class:`EchoProcessor` only."""
    rng = np.random.default_rng(seed)
    entries = [ListEntry(key=f"utt{i:03d}", txt="one two", duration=float(rng.uniform(0.5, 3.5)),
                         wav=f"/nonexistent/utt{i:03d}.wav") for i in range(n)]
    path = tmp_path / f"{kind}_{n}_{seed}.list"
    if kind == "raw":
        import json
        path.write_text("".join(json.dumps({"key": e.key, "wav": e.wav, "txt": e.txt, "duration": e.duration}) + "\n"
                                for e in entries), encoding="utf-8")
    else:
        shards = []
        for t in range(0, n, 6):
            members = [ListEntry(key=e.key, txt=e.txt, duration=e.duration, tar=f"/nonexistent/s{t}.tar",
                                 offset=512 + 1024 * j, size=512) for j, e in enumerate(entries[t:t + 6])]
            shards.append((f"/nonexistent/s{t}.tar", members))
        write_shard_list(path, shards)
    out = read_list(path)
    assert (out[0].tar is not None) == (kind == "shard")
    return out


class EchoProcessor:
    """Stand-in for ``SampleProcessor`` that reads no audio: a 2-dim feature of
    ``10 x duration`` frames filled with the epoch (so a test sees which epoch a worker
    processed).  With ``log_dir`` set, every call appends ``<key>`` to
    ``log_dir/<pid>.log`` (so a test sees which utterances workers processed)."""

    def __init__(self, log_dir: Path | None = None):
        self.log_dir = log_dir

    def __call__(self, entry: ListEntry, epoch: int) -> dict:
        if self.log_dir is not None:
            with open(self.log_dir / f"{os.getpid()}.log", "a", encoding="utf-8") as f:
                f.write(entry.key + "\n")
        frames = max(1, int(entry.duration * 10))
        return {"key": entry.key, "txt": entry.txt, "tokens": [2, 3],
                "feat": torch.full((frames, 2), float(epoch))}

    def collate(self, samples) -> dict:
        return collate(samples, feat_dim=2)


def processed_keys(log_dir: Path) -> list[str]:
    """Keys an :class:`EchoProcessor` with this ``log_dir`` processed, in any process."""
    return [k for f in sorted(log_dir.glob("*.log")) for k in f.read_text(encoding="utf-8").split()]


# ----------------------------------------------------------------------------- tests

MODES = ("static", "dynamic", "bucket")
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def world(entries, conf, processor, world_size, *, train=True, seed=5):
    return [build_dataloader(entries, conf, processor, train=train, seed=seed, rank=r, world_size=world_size)
            for r in range(world_size)]


def consume(loader, limit=None):
    """Batches of one pass of ``loader`` (the first ``limit`` ones)."""
    out = []
    for batch in loader:
        out.append(batch)
        if limit is not None and len(out) == limit:
            break
    return out


def keys_of(batches):
    return [k for b in batches for k in b["keys"]]


def processed_at(batch, epoch) -> bool:
    """Every real (unpadded) frame of an :class:`EchoProcessor` batch holds ``epoch``."""
    return all(bool((feat[:n] == epoch).all()) for feat, n in zip(batch["feats"], batch["feats_lengths"]))


@pytest.mark.parametrize("world_size,num_workers", [(w, nw) for w in (1, 2, 3, 4) for nw in (0, 1, 2, 3)])
def test_ranks_consume_equal_batch_counts_and_every_key_once(tmp_path, world_size, num_workers):
    case = 4 * world_size + num_workers  # cycles through the 3 modes x raw/shard and 4 list sizes
    mode, kind, n = MODES[case % 3], ("raw", "shard")[(case // 3) % 2], (29, 37, 41, 53)[case % 4]
    entries = metadata_list(tmp_path, n, kind)
    conf = loader_conf(mode, num_workers=num_workers)
    per_epoch: dict[int, list[list[str]]] = {0: [], 1: []}
    counts = []
    for loader in world(entries, conf, EchoProcessor(), world_size):
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            batches = consume(loader)
            assert len(batches) == len(loader)
            assert all(processed_at(b, epoch) for b in batches), "a worker saw the wrong epoch"
            per_epoch[epoch].append(keys_of(batches))
            counts.append((epoch, len(batches)))
        del loader
    for epoch in (0, 1):
        assert len({c for e, c in counts if e == epoch}) == 1, f"epoch {epoch}: unequal batch counts {counts}"
        flat = [k for rank_keys in per_epoch[epoch] for k in rank_keys]
        assert sorted(flat) == sorted(e.key for e in entries), f"epoch {epoch}: keys lost or repeated"
    assert per_epoch[0] != per_epoch[1]


def test_consumed_order_is_the_same_for_any_workers_and_persistence(tmp_path):
    entries = metadata_list(tmp_path, 45, "shard")
    runs = {}
    for num_workers, persistent in ((0, False), (2, True), (2, False), (3, True)):
        conf = loader_conf("dynamic", num_workers=num_workers, persistent_workers=persistent)
        loader = build_dataloader(entries, conf, EchoProcessor(), train=True, seed=9, rank=1, world_size=2)
        epochs = []
        for epoch in range(3):
            loader.set_epoch(epoch)
            epochs.append([b["keys"] for b in consume(loader)])
        runs[(num_workers, persistent)] = epochs
        if persistent:
            assert loader.dataloader._iterator is not None, "workers should have persisted"
    first = runs[(0, False)]
    assert all(r == first for r in runs.values())
    assert first[0] != first[1] != first[2]


def test_an_abandoned_pass_leaves_persistent_workers_ready_for_the_next(tmp_path):
    entries = metadata_list(tmp_path, 40, "raw")
    conf = loader_conf("static", num_workers=2, prefetch_factor=2, persistent_workers=True)
    loader = build_dataloader(entries, conf, EchoProcessor(), train=True, seed=2, rank=0, world_size=1)
    loader.set_epoch(1)
    full = consume(loader)
    loader.set_epoch(0)
    consume(loader, limit=2)  # break off with batches still in flight
    loader.set_epoch(1)
    again = consume(loader)
    assert [b["keys"] for b in again] == [b["keys"] for b in full]
    assert all(processed_at(b, 1) for b in again)


def test_state_counts_consumed_batches_and_resume_decodes_only_the_rest(tmp_path):
    entries = metadata_list(tmp_path, 40, "raw")
    conf = loader_conf("static", num_workers=2, prefetch_factor=2)
    reference = build_dataloader(entries, conf, EchoProcessor(), train=True, seed=3, rank=0, world_size=1)
    reference.set_epoch(4)
    full = [b["keys"] for b in consume(reference)]

    first_log, second_log = tmp_path / "first", tmp_path / "second"
    first_log.mkdir(), second_log.mkdir()
    loader = build_dataloader(entries, conf, EchoProcessor(first_log), train=True, seed=3, rank=0, world_size=1)
    loader.set_epoch(4)
    it = iter(loader)
    got = [next(it)["keys"] for _ in range(2)]
    state = loader.state_dict()
    assert state["consumed"] == 2 and state["epoch"] == 4
    assert len(processed_keys(first_log)) > len(keys_of([{"keys": k} for k in got])), \
        "workers should have prefetched beyond the consumed batches"
    del it, loader

    resumed = build_dataloader(entries, conf, EchoProcessor(second_log), train=True, seed=3, rank=0, world_size=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(4)
    rest = [b["keys"] for b in consume(resumed)]
    assert got + rest == full
    assert sorted(processed_keys(second_log)) == sorted(k for b in full[2:] for k in b), \
        "the resumed loader must decode exactly the batches not yet consumed"
    assert len(resumed) == len(full)


@pytest.mark.parametrize("old_world,new_world", [(2, 3), (3, 1)])
def test_resume_under_another_world_size_trains_every_remaining_key_once(tmp_path, old_world, new_world):
    entries = metadata_list(tmp_path, 50, "shard")
    conf = loader_conf("bucket", num_workers=1)
    trained, state = [], None
    for loader in world(entries, conf, EchoProcessor(), old_world):
        loader.set_epoch(2)
        trained += keys_of(consume(loader, limit=2))
        state = loader.state_dict()
    counts = []
    for loader in world(entries, conf, EchoProcessor(), new_world):
        loader.load_state_dict(state)
        loader.set_epoch(2)
        rest = consume(loader)
        counts.append(len(rest))
        trained += keys_of(rest)
    assert len(set(counts)) == 1
    assert sorted(trained) == sorted(e.key for e in entries)


def test_planned_empty_batches_reach_the_trainer_as_empty_batches(tmp_path):
    entries = metadata_list(tmp_path, 2, "raw")
    sizes = []
    for loader in world(entries, loader_conf("static", num_workers=1), EchoProcessor(), 4):
        loader.set_epoch(0)
        sizes += [len(b["keys"]) for b in consume(loader)]
        assert len(loader) == 1
    assert sorted(sizes) == [0, 0, 1, 1]


def test_loader_options_reach_the_dataloader(tmp_path):
    entries = metadata_list(tmp_path, 10, "raw")
    conf = loader_conf("static", num_workers=2, prefetch_factor=3, persistent_workers=False, pin_memory=True)
    dl = build_dataloader(entries, conf, EchoProcessor(), train=True, seed=0, rank=0, world_size=1).dataloader
    assert (dl.num_workers, dl.prefetch_factor, dl.persistent_workers) == (2, 3, False)
    assert dl.pin_memory == torch.cuda.is_available(), "pin_memory is used only with CUDA"
    conf = loader_conf("static", num_workers=0)
    dl = build_dataloader(entries, conf, EchoProcessor(), train=True, seed=0, rank=0, world_size=1).dataloader
    assert (dl.num_workers, dl.prefetch_factor, dl.persistent_workers) == (0, None, False)


# ----------------------------------------------------------------------------- real audio


@pytest.fixture(scope="module")
def dev_shard_list(tiny_corpus, tmp_path_factory):
    """The dev split packed by tools/make_shard_list.py into tars of 5 members."""
    out = tmp_path_factory.mktemp("dev_shards")
    run_tool("make_shard_list.py", "--num_utts_per_shard", 5, tiny_corpus.splits["dev"].data_list,
             out / "shards", out / "shards.list")
    return out / "shards.list"


def test_resume_gives_bit_identical_augmented_features(tiny_corpus, tiny_units):
    entries = read_list(tiny_corpus.splits["train"].data_list)
    conf, processor = real_setup(tiny_units, train=True, speed_perturb=True, fbank_conf={"dither": 1.0},
                                 spec_aug=True, spec_sub=True, num_workers=2, prefetch_factor=2,
                                 batch_conf={"batch_type": "dynamic", "max_frames_in_batch": 1500})
    reference = build_dataloader(entries, conf, processor, train=True, seed=17, rank=0, world_size=1)
    reference.set_epoch(1)
    full = consume(reference)
    assert len(full) >= 6

    loader = build_dataloader(entries, conf, processor, train=True, seed=17, rank=0, world_size=1)
    loader.set_epoch(1)
    head = consume(loader, limit=3)
    state = loader.state_dict()
    assert state["consumed"] == 3
    del loader
    resumed = build_dataloader(entries, conf, processor, train=True, seed=17, rank=0, world_size=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    tail = consume(resumed)
    assert len(head) + len(tail) == len(full)
    for got, want in zip(head + tail, full):
        assert got["keys"] == want["keys"]
        assert torch.equal(got["feats"], want["feats"])
        assert torch.equal(got["feats_lengths"], want["feats_lengths"])
        assert torch.equal(got["target"], want["target"])
    entry = next(e for e in entries if e.key == full[0]["keys"][0])
    assert not torch.equal(processor(entry, 1)["feat"], processor(entry, 2)["feat"]), "augmentation is off"


@pytest.mark.parametrize("world_size,num_workers,kind", [(1, 0, "raw"), (2, 1, "shard"), (3, 0, "raw"),
                                                         (5, 0, "shard")])
def test_cv_evaluates_each_utterance_exactly_once_across_ranks(tiny_corpus, tiny_units, dev_shard_list, world_size,
                                                               num_workers, kind):
    entries = read_list(dev_shard_list if kind == "shard" else tiny_corpus.splits["dev"].data_list)
    conf, processor = real_setup(tiny_units, train=False, num_workers=num_workers,
                                 batch_conf={"batch_type": "static", "batch_size": 5})
    seen, counts = [], []
    for loader in world(entries, conf, processor, world_size, train=False):
        loader.set_epoch(3)
        batches = consume(loader)
        counts.append(len(batches))
        seen += keys_of(batches)
        assert all(not b["skipped"] for b in batches)
    assert len(set(counts)) == 1
    assert sorted(seen) == sorted(e.key for e in entries), "a CV utterance was missed or repeated"
