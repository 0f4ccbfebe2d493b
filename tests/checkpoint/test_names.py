"""The checkpoint-naming rule (asrkit.checkpoint.names): parsing, the training order,
pruning, averaged models, the checkpoint to decode and the checkpoints to average.  Files
are stand-ins (the rule reads names and ``.yaml`` records, never the weights)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from asrkit.checkpoint import names
from asrkit.checkpoint.names import CheckpointName, CheckpointSelectionError


def make(model_dir: Path, name: str, mtime: float, **record) -> Path:
    """A stand-in checkpoint ``name`` modified at ``mtime``, with ``record`` as its ``.yaml``."""
    path = model_dir / name
    path.write_bytes(b"weights")
    if record:
        path.with_suffix(".yaml").write_text(yaml.safe_dump(record))
    os.utime(path, (mtime, mtime))
    return path


def listed(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_parse_name():
    assert names.parse_name("step_120.pt") == CheckpointName("step", 120)
    assert names.parse_name(Path("exp/x/epoch_3.pt")) == CheckpointName("epoch", 3)
    assert names.parse_name("avg_10.pt") == CheckpointName("average", 10)
    assert names.parse_name("exp/avg_best.pt") == CheckpointName("average", None)
    for other in ("final.pt", "init.pt", "step_3.pt.bak", "step_3.yaml", "xstep_3.pt", "epoch_.pt", "step_a.pt",
                  "nonfinite_step1_rank0.pt"):
        assert names.parse_name(other) is None, other
    for kind, number in (("step", 7), ("epoch", 0), ("average", 5)):
        assert names.parse_name(names.checkpoint_filename(kind, number)) == CheckpointName(kind, number)


def test_training_order_is_by_recorded_step_never_by_modification_time(tmp_path):
    make(tmp_path, "epoch_0.pt", 100, epoch=0, step=10)
    make(tmp_path, "step_10.pt", 400, epoch=0, step=10)   # same step: the step checkpoint first
    make(tmp_path, "step_9.pt", 300)                        # no record: N of the name (9 < 10, not "9" > "10")
    make(tmp_path, "epoch_1.pt", 50)                        # no record: -1, never the newest
    make(tmp_path, "step_25.pt", 200, epoch=1, step=25)
    make(tmp_path, "final.pt", 500)
    make(tmp_path, "avg_2.pt", 500)
    (tmp_path / "step_30.pt").mkdir()                       # not a file
    expected = ["epoch_1.pt", "step_9.pt", "step_10.pt", "epoch_0.pt", "step_25.pt"]
    assert listed(names.training_checkpoints(tmp_path)) == expected
    # a copy of an older checkpoint over an old name, touched to be the newest file: same order
    (tmp_path / "step_10.pt").write_bytes((tmp_path / "step_25.pt").read_bytes())
    os.utime(tmp_path / "step_10.pt", (10_000, 10_000))
    assert listed(names.training_checkpoints(tmp_path)) == expected
    assert listed(names.training_checkpoints(tmp_path, "epoch")) == ["epoch_1.pt", "epoch_0.pt"]
    assert listed(names.training_checkpoints(tmp_path, "step")) == ["step_9.pt", "step_10.pt", "step_25.pt"]
    assert names.training_step(tmp_path / "step_25.pt") == 25 and names.training_step(tmp_path / "epoch_1.pt") == -1
    assert names.training_checkpoints(tmp_path / "missing") == []
    with pytest.raises(ValueError):
        names.training_checkpoints(tmp_path, "average")


def test_step_checkpoints_beyond_the_newest_keep(tmp_path):
    for n, mtime in ((1, 400), (2, 300), (3, 200), (4, 100)):  # mtimes reversed: they do not count
        make(tmp_path, f"step_{n}.pt", mtime, step=n)
    make(tmp_path, "epoch_0.pt", 50, step=1)
    assert listed(names.step_checkpoints_beyond(tmp_path, 2)) == ["step_1.pt", "step_2.pt"]
    assert listed(names.step_checkpoints_beyond(tmp_path, 0)) == ["step_1.pt", "step_2.pt", "step_3.pt", "step_4.pt"]
    assert names.step_checkpoints_beyond(tmp_path, 9) == []


def test_averaged_models(tmp_path):
    for name in ("avg_10.pt", "avg_2.pt", "avg_best.pt", "epoch_3.pt", "final.pt"):
        make(tmp_path, name, 100)
    assert listed(names.averaged_models(tmp_path)) == ["avg_best.pt", "avg_2.pt", "avg_10.pt"]


def test_the_checkpoint_to_decode(tmp_path):
    make(tmp_path, "epoch_3.pt", 100, epoch=3, step=40)
    make(tmp_path, "step_50.pt", 50, epoch=4, step=50)
    make(tmp_path, "epoch_2.pt", 900, epoch=2, step=30)  # copied back, the newest file: not the newest checkpoint
    assert names.checkpoint_to_decode(tmp_path).name == "step_50.pt"
    make(tmp_path, "final.pt", 10)
    assert names.checkpoint_to_decode(tmp_path).name == "final.pt"
    make(tmp_path, "avg_best.pt", 1000)  # no number: never guessed at
    assert names.checkpoint_to_decode(tmp_path).name == "final.pt"
    make(tmp_path, "avg_10.pt", 10)
    make(tmp_path, "avg_5.pt", 1000)  # written later, fewer checkpoints averaged
    assert names.checkpoint_to_decode(tmp_path).name == "avg_10.pt"
    assert names.checkpoint_to_decode(tmp_path / "missing") is None


def test_the_checkpoints_to_average(tmp_path):
    for epoch, loss, mtime in ((0, 5.0, 400), (1, 3.0, 300), (2, 4.0, 200), (10, 3.0, 100), (3, 9.0, 0)):
        make(tmp_path, f"epoch_{epoch}.pt", mtime, epoch=epoch, step=10 * epoch, cv_loss=loss)
    make(tmp_path, "step_99.pt", 500, step=99)
    average = names.checkpoints_to_average
    assert listed(average(tmp_path, 2, "last")) == ["epoch_3.pt", "epoch_10.pt"]  # by epoch number, summed in that order
    assert listed(average(tmp_path, 3, "best")) == ["epoch_1.pt", "epoch_2.pt", "epoch_10.pt"]
    assert listed(average(tmp_path, 1, "best")) == ["epoch_10.pt"]  # equal losses: the later epoch
    assert listed(average(tmp_path, 9, "last", min_epoch=1, max_epoch=3)) == ["epoch_1.pt", "epoch_2.pt", "epoch_3.pt"]
    with pytest.raises(CheckpointSelectionError, match="no epoch_\\*.pt checkpoints .* with epoch 20..30"):
        average(tmp_path, 2, "last", min_epoch=20, max_epoch=30)
    with pytest.raises(CheckpointSelectionError, match=">= 1"):
        average(tmp_path, 0, "last")
    make(tmp_path, "epoch_4.pt", 0, epoch=4)
    with pytest.raises(CheckpointSelectionError, match=r"cv_loss for every epoch; missing for \['epoch_4.pt'\]"):
        average(tmp_path, 2, "best")
    assert listed(average(tmp_path, 1, "last")) == ["epoch_10.pt"]
