"""PlannedBatchDataset and the loader's skip handling, on real audio (asrkit.data.dataset)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from asrkit.data.dataset import BatchTask, PlannedBatchDataset, build_dataloader
from asrkit.data.lists import read_list
from asrkit.data.processors import Skip
from tests.data.audio_helpers import real_setup


@pytest.fixture(scope="module")
def dev_entries(tiny_corpus):
    return read_list(tiny_corpus.splits["dev"].data_list)


def test_a_task_becomes_the_collated_batch_of_its_utterances_in_task_order(tiny_units, dev_entries):
    _, processor = real_setup(tiny_units, train=False)
    dataset = PlannedBatchDataset(dev_entries, processor)
    out = dataset[BatchTask(epoch=2, position=7, indices=(5, 0, 3))]
    assert (out["position"], out["epoch"]) == (7, 2)
    batch = out["batch"]
    assert batch["keys"] == [dev_entries[i].key for i in (5, 0, 3)]
    assert batch["feats"].dtype == torch.float32 and batch["feats"].shape[0] == 3
    assert batch["feats"].shape[1] == int(batch["feats_lengths"].max())
    assert batch["target"].dtype == torch.int64 and batch["skipped"] == []
    for row, n in zip(batch["target"], batch["target_lengths"]):
        assert (row[n:] == -1).all() and (row[:n] >= 0).all()


def test_an_empty_task_gives_an_empty_batch(tiny_units, dev_entries):
    _, processor = real_setup(tiny_units, train=False)
    batch = PlannedBatchDataset(dev_entries, processor)[BatchTask(0, 0, ())]["batch"]
    assert batch["keys"] == [] and batch["feats"].shape[0] == 0 and batch["target"].shape[0] == 0


def test_the_dataset_is_indexed_by_tasks_only(tiny_units, dev_entries):
    _, processor = real_setup(tiny_units, train=False)
    with pytest.raises(TypeError, match="BatchTask"):
        PlannedBatchDataset(dev_entries, processor)[3]


def test_unreadable_audio_is_a_counted_skip_and_the_batch_still_comes(tiny_units, dev_entries, tmp_path):
    broken = dataclasses.replace(dev_entries[0], key="zz_missing", wav=str(tmp_path / "gone.wav"))
    entries = list(dev_entries) + [broken]
    conf, processor = real_setup(tiny_units, train=False, num_workers=1,
                                 batch_conf={"batch_type": "static", "batch_size": 13})
    loader = build_dataloader(entries, conf, processor, train=False, seed=0, rank=0, world_size=1)
    batches = list(loader)
    assert len(batches) == len(loader) == 1
    assert len(batches[0]["keys"]) == len(dev_entries)
    skipped = batches[0]["skipped"]
    assert [s.key for s in skipped] == ["zz_missing"] and isinstance(skipped[0], Skip)
    assert loader.skip_stats.total == 1
    assert loader.state_dict()["consumed"] == 1
