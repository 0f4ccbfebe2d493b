"""A sharded checkpoint's folder (``asrkit.checkpoint.sharded``): tensors only, every file's
digest checked before DCP opens any, a crash leaving the previous checkpoint the newest that
loads.  One process (DCP without a process group)."""
from __future__ import annotations

import pytest
import torch

from asrkit.checkpoint.load import SHARDS, CheckpointError, find_resume_checkpoint, verify_sharded
from asrkit.checkpoint.save import prune_step_checkpoints, remove_stale_temporaries, save_checkpoint
from asrkit.checkpoint.sharded import read_sharded, write_sharded


def sharded_checkpoint(model_dir, step: int, value: float):
    """``step_<step>.pt`` with a tensor of ``value`` in its shards (as a sharded run writes it)."""
    path = model_dir / f"step_{step}.pt"
    record = write_sharded(path, {"optimizer": {"w": {"exp_avg": torch.full((4, 3), value)}}}, is_main=True)
    save_checkpoint(path, {"model": {"w": torch.zeros(4, 3)}, SHARDS: record}, {"step": step})
    return path, record


def test_write_read_and_every_file_checked(tmp_path):
    path, record = sharded_checkpoint(tmp_path, 2, 1.5)
    assert record["folder"] == "step_2.dcp" and ".metadata" in record["files"]
    target = {"optimizer": {"w": {"exp_avg": torch.zeros(4, 3)}}}
    read_sharded(path, record, target, distributed=False)
    assert torch.equal(target["optimizer"]["w"]["exp_avg"], torch.full((4, 3), 1.5))
    metadata = tmp_path / "step_2.dcp" / ".metadata"
    data = metadata.read_bytes()
    metadata.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one flipped bit: never unpickled
    with pytest.raises(CheckpointError, match=r"shard file step_2.dcp/.metadata is corrupted \(its SHA-256"):
        read_sharded(path, record, target, distributed=False)
    metadata.write_bytes(data)
    (tmp_path / "step_2.dcp" / "extra.distcp").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="has files it was not written with: extra.distcp"):
        verify_sharded(path, record)


def test_only_tensors_go_into_the_folder(tmp_path):
    with pytest.raises(TypeError, match="optimizer.lr is a float: only tensors go into the DCP folder"):
        write_sharded(tmp_path / "step_1.pt", {"optimizer": {"lr": 0.1}}, is_main=True)


def test_broken_shards_make_auto_resume_fall_back_and_crash_leftovers_are_removed(tmp_path):
    sharded_checkpoint(tmp_path, 2, 1.0)
    sharded_checkpoint(tmp_path, 4, 2.0)
    assert find_resume_checkpoint(tmp_path) == tmp_path / "step_4.pt"
    next((tmp_path / "step_4.dcp").glob("*.distcp")).unlink()
    assert find_resume_checkpoint(tmp_path) == tmp_path / "step_2.pt"
    # a writer that died: a folder still being written, a renamed folder whose .pt never came
    (tmp_path / ".step_6.dcp.tmp-parts").mkdir()
    (tmp_path / "step_6.dcp").mkdir()
    assert remove_stale_temporaries(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["step_2.dcp", "step_4.dcp"]
    prune_step_checkpoints(tmp_path, 1)
    assert not (tmp_path / "step_2.dcp").exists() and (tmp_path / "step_4.dcp").is_dir()
