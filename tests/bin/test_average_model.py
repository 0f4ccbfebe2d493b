"""``asrkit.bin.average_model``: fewer checkpoints than ``--num`` is a warning with the
requested and found counts (the found ones are averaged), an error with ``--strict``; the
average carries the config and units digests of the last checkpoint."""
from __future__ import annotations

import torch

from asrkit.bin.average_model import main
from asrkit.config_files import INPUT_DIGESTS
from asrkit import checkpoint as ckpt


def three_epochs(model_dir):
    for epoch in range(3):
        ckpt.save_checkpoint(model_dir / f"epoch_{epoch}.pt",
                             {"model": {"w": torch.full((2,), float(epoch))}, "config": {"seed": epoch},
                              INPUT_DIGESTS: {"units": "ab" * 32}},
                             {"epoch": epoch, "step": epoch + 1, "cv_loss": 1.0 / (epoch + 1)})


def test_fewer_checkpoints_than_asked_warns_with_both_counts(tmp_path, capsys):
    three_epochs(tmp_path)
    assert main(["--model_dir", str(tmp_path), "--num", "5", "--dst", str(tmp_path / "avg_5.pt")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"warning: --num 5 asked for 5 checkpoints, {tmp_path} has 3 to average"), err
    assert err[-1].startswith("averaged 3 checkpoints")
    avg = ckpt.load_checkpoint(tmp_path / "avg_5.pt")
    assert torch.equal(avg["model"]["w"], torch.ones(2))
    assert avg["config"] == {"seed": 2} and avg[INPUT_DIGESTS] == {"units": "ab" * 32}


def test_strict_refuses_fewer_checkpoints_than_asked(tmp_path, capsys):
    three_epochs(tmp_path)
    assert main(["--model_dir", str(tmp_path), "--num", "5", "--strict", "--dst", str(tmp_path / "avg_5.pt")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: --num 5 asked for 5 checkpoints") and "has 3" in err[0]
    assert not (tmp_path / "avg_5.pt").exists()
    assert main(["--model_dir", str(tmp_path), "--num", "3", "--strict", "--dst", str(tmp_path / "avg_3.pt")]) == 0
