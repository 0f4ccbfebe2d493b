"""Checkpoints: weights_only loading, pickle refusal, atomic writes, resume lookup, averaging."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

from asrkit.checkpoint.names import training_checkpoints
from asrkit import checkpoint as ckpt
from tests.helpers import REPO


def _state(value: float) -> dict:
    return {"model": {"w": torch.full((3,), value), "n": torch.tensor(7)}, "step": int(value),
            "rng": ckpt.capture_rng_state(), "config": {"a": [1, 2], "b": None}}


def test_round_trip_with_weights_only(tmp_path):
    import random
    import numpy as np
    state = _state(1.0)  # (captures the RNG states now)
    expected = (random.random(), float(np.random.rand()), torch.rand(3))  # the draws that follow the capture
    path = ckpt.save_checkpoint(tmp_path / "step_1.pt", state, {"epoch": 0, "step": 1})
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == ckpt.FORMAT_VERSION and raw["step"] == 1
    assert ckpt.read_info(path) == {"epoch": 0, "step": 1}
    assert raw["model"].keys() == state["model"].keys()
    for name, tensor in state["model"].items():
        assert torch.equal(raw["model"][name], tensor) and raw["model"][name].dtype == tensor.dtype, name
    assert raw["config"] == state["config"]
    random.random(), np.random.rand(), torch.rand(3)  # move every generator on
    ckpt.restore_rng_state(raw["rng"])
    again = (random.random(), float(np.random.rand()), torch.rand(3))
    assert again[:2] == expected[:2] and torch.equal(again[2], expected[2])


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickled_object_is_refused(tmp_path):
    path = tmp_path / "step_5.pt"
    torch.save({"model": {"w": torch.zeros(1)}, "evil": Payload()}, path)
    with pytest.raises(ckpt.CheckpointError, match="refused"):
        ckpt.load_checkpoint(path)
    (tmp_path / "plain.pt").write_bytes(pickle.dumps({"model": Payload()}))
    with pytest.raises(ckpt.CheckpointError):
        ckpt.load_checkpoint(tmp_path / "plain.pt")


def test_failed_write_leaves_previous_checkpoint(tmp_path, monkeypatch):
    good = ckpt.save_checkpoint(tmp_path / "step_1.pt", _state(1.0), {"step": 1})
    before = good.read_bytes()

    def dying_save(obj, f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(ckpt.CheckpointError, match="previous checkpoints are intact"):
        ckpt.save_checkpoint(tmp_path / "step_1.pt", _state(2.0), {"step": 2})
    monkeypatch.undo()
    assert good.read_bytes() == before
    assert not list(tmp_path.glob(".*tmp*"))
    assert ckpt.load_checkpoint(good)["step"] == 1


def test_killed_writer_leaves_previous_checkpoint(tmp_path):
    """A writer process SIGKILLed in the middle of torch.save: the old file is untouched."""
    good = ckpt.save_checkpoint(tmp_path / "step_1.pt", _state(1.0), {"step": 1})
    before = good.read_bytes()
    code = (
        "import os, signal, torch\n"
        "from asrkit import checkpoint as ckpt\n"
        "real = torch.save\n"
        "def save(obj, f):\n"
        "    f.write(b'x' * 1000); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "torch.save = save\n"
        f"ckpt.save_checkpoint({str(good)!r}, {{'model': {{'w': torch.ones(3)}}}}, {{'step': 2}})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True)
    assert proc.returncode == -9
    assert good.read_bytes() == before
    assert ckpt.find_resume_checkpoint(tmp_path) == good
    assert ckpt.remove_stale_temporaries(tmp_path) == 1


def test_resume_lookup_skips_broken_newest(tmp_path, caplog):
    a = ckpt.save_checkpoint(tmp_path / "step_10.pt", _state(1.0), {"epoch": 0, "step": 10})
    b = ckpt.save_checkpoint(tmp_path / "epoch_0.pt", _state(2.0), {"epoch": 0, "step": 10})
    c = ckpt.save_checkpoint(tmp_path / "step_20.pt", _state(3.0), {"epoch": 1, "step": 20})
    assert training_checkpoints(tmp_path) == [a, b, c]  # (the order the lookup goes through, newest last)
    data = c.read_bytes()
    c.write_bytes(data[: len(data) // 2])  # truncated
    with caplog.at_level("WARNING"):
        assert ckpt.find_resume_checkpoint(tmp_path) == b
    assert "truncated or corrupted" in caplog.text


def test_prune_keeps_newest_steps_and_all_epochs(tmp_path):
    for s in (1, 2, 3, 4):
        ckpt.save_checkpoint(tmp_path / f"step_{s}.pt", _state(s), {"step": s})
    ckpt.save_checkpoint(tmp_path / "epoch_0.pt", _state(0.0), {"step": 2})
    ckpt.prune_step_checkpoints(tmp_path, keep=2)
    names = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert names == ["epoch_0.pt", "step_3.pt", "step_4.pt"]


def test_average(tmp_path):
    paths = [ckpt.save_checkpoint(tmp_path / f"epoch_{i}.pt", _state(float(i))) for i in (1, 2, 6)]
    avg = ckpt.average_state_dicts(paths)
    assert torch.allclose(avg["w"], torch.full((3,), 3.0)) and avg["n"].item() == 7


class _Net(torch.nn.Module):
    def __init__(self, hidden: int = 4, vocab: int = 3):
        super().__init__()
        self.encoder = torch.nn.Linear(2, hidden)
        self.ctc = torch.nn.Linear(hidden, vocab)


def test_init_modules_copies_only_the_prefixes(tmp_path):
    torch.manual_seed(0)
    source, fresh = _Net(vocab=30), _Net(vocab=500)
    path = ckpt.save_checkpoint(tmp_path / "epoch_0.pt", {"model": source.state_dict()})
    before_ctc = fresh.ctc.weight.detach().clone()
    copied = ckpt.init_modules(fresh, path, ["encoder."])
    assert sorted(copied) == ["encoder.bias", "encoder.weight"]
    assert torch.equal(fresh.encoder.weight, source.encoder.weight)
    assert torch.equal(fresh.ctc.weight, before_ctc)  # a different vocabulary: left fresh


def test_init_modules_refuses_a_shape_mismatch_and_an_unknown_prefix(tmp_path):
    path = ckpt.save_checkpoint(tmp_path / "epoch_0.pt", {"model": _Net(hidden=8).state_dict()})
    with pytest.raises(ckpt.CheckpointError, match=r"'encoder.weight' is \(8, 2\) in the checkpoint, \(4, 2\)"):
        ckpt.init_modules(_Net(hidden=4), path, ["encoder."])
    with pytest.raises(ckpt.CheckpointError, match="no parameter whose name starts with 'decoder.'"):
        ckpt.init_modules(_Net(hidden=8), path, ["decoder."])
