"""Item 3 -- broken checkpoints: a truncated or corrupted newest checkpoint is detected and
``--checkpoint auto`` falls back to the previous valid one with a warning; a checkpoint write
that fails for lack of space (simulated with ``RLIMIT_FSIZE``) leaves the previous
checkpoints intact and stops the run with a clear message."""
from __future__ import annotations

import resource
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from asrkit.checkpoint.names import training_checkpoints
from asrkit import checkpoint as ckpt
from tests.helpers import REPO, plain_env, train_args, train_here


def train_cmd(exp, model_dir, config, *extra):
    return [sys.executable, "-m", "asrkit.bin.train", *train_args(exp, model_dir, config), *map(str, extra)]


@pytest.fixture(scope="module")
def trained(tiny_experiment, tmp_path_factory):
    """One process, 6 steps per epoch, stopped by --max_steps 4: step_2.pt and step_4.pt."""
    root = tmp_path_factory.mktemp("broken_ckpt")
    config = tiny_experiment.config(root / "c.yaml", save_interval=2)
    model_dir = root / "exp"
    train_here(tiny_experiment, model_dir, config, "--max_steps", 4)
    assert [p.name for p in training_checkpoints(model_dir)] == ["step_2.pt", "step_4.pt"]
    return config, model_dir


def flip_middle(path):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    path.write_bytes(bytes(data))


BREAKERS = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "flipped_bytes": flip_middle,
    "empty": lambda p: p.write_bytes(b""),
    "truncated_without_record": lambda p: (p.write_bytes(p.read_bytes()[:-100]), p.with_suffix(".yaml").unlink()),
}


@pytest.mark.parametrize("breaker", sorted(BREAKERS))
def test_broken_newest_checkpoint_is_skipped_with_a_warning(trained, tmp_path, caplog, breaker):
    model_dir = tmp_path / "exp"
    shutil.copytree(trained[1], model_dir)
    newest = model_dir / "step_4.pt"
    BREAKERS[breaker](newest)
    with caplog.at_level("WARNING", logger="asrkit.train"):
        assert ckpt.find_resume_checkpoint(model_dir) == model_dir / "step_2.pt"
    assert "skipping unusable checkpoint" in caplog.text and "step_4.pt" in caplog.text
    assert "truncated or corrupted" in caplog.text or "is corrupted" in caplog.text
    with pytest.raises(ckpt.CheckpointError):
        ckpt.load_checkpoint(newest)


def test_flipped_tensor_bytes_are_caught_by_the_recorded_digest(trained, tmp_path):
    """torch.load alone does not notice changed tensor bytes; the SHA-256 in step_4.yaml does."""
    model_dir = tmp_path / "exp"
    shutil.copytree(trained[1], model_dir)
    newest = model_dir / "step_4.pt"
    flip_middle(newest)
    torch.load(newest, weights_only=True)  # loads without complaint: garbage weights
    with pytest.raises(ckpt.CheckpointError, match="SHA-256"):
        ckpt.load_checkpoint(newest)


def test_auto_resume_falls_back_to_previous_valid_checkpoint(tiny_experiment, trained, tmp_path):
    config, src = trained
    model_dir = tmp_path / "exp"
    shutil.copytree(src, model_dir)
    flip_middle(model_dir / "step_4.pt")
    proc = train_here(tiny_experiment, model_dir, config, "--checkpoint", "auto", "--max_steps", 6)
    assert "skipping unusable checkpoint" in proc.stderr and "step_4.pt is corrupted" in proc.stderr
    assert f"resumed from {model_dir / 'step_2.pt'}: epoch 0, step 2 (mid-epoch)" in proc.stderr
    assert "reached max_steps=6" in proc.stderr
    assert ckpt.load_checkpoint(model_dir / "step_4.pt")["train_state"]["step"] == 4  # rewritten, valid again


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer instead of failing the write
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_failed_write_keeps_previous_checkpoints_and_stops_clearly(tiny_experiment, trained, tmp_path):
    config, src = trained
    model_dir = tmp_path / "exp"
    shutil.copytree(src, model_dir)
    before = {p.name: p.read_bytes() for p in model_dir.glob("step_*")}
    limit = (model_dir / "step_4.pt").stat().st_size // 2  # logs and yaml files stay far below it
    proc = subprocess.run(train_cmd(tiny_experiment, model_dir, config, "--checkpoint", "auto", "--max_steps", 6),
                          cwd=REPO, env=plain_env(), capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_file_size(limit))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"resumed from {model_dir / 'step_4.pt'}" in proc.stderr
    assert (f"training stopped: could not write {model_dir / 'step_6.pt'}: OSError: [Errno 27] File too large"
            in proc.stderr), proc.stderr[-3000:]
    assert "the previous checkpoints are intact" in proc.stderr and "Traceback" not in proc.stderr
    assert {p.name: p.read_bytes() for p in model_dir.glob("step_*")} == before
    assert not list(model_dir.glob(".*tmp*")) and not (model_dir / "step_6.pt").exists()
    assert ckpt.find_resume_checkpoint(model_dir) == model_dir / "step_4.pt"
