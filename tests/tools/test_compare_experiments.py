"""tools/compare_experiments.py: two runs' checkpoints and decoding results, file by file."""
from __future__ import annotations

import shutil

import torch

from asrkit.checkpoint.save import save_checkpoint
from tools import compare_experiments


def _run(root, value: float = 1.0, text: str = "u1 one\n"):
    save_checkpoint(root / "epoch_0.pt", {"model": {"w": torch.full((3,), value)}, "config": {"root": str(root)}},
                    {"epoch": 0})
    (root / "decode_test" / "attention").mkdir(parents=True)
    (root / "decode_test" / "attention" / "text").write_text(text)
    return root


def test_identical_runs_pass_and_each_difference_is_one_line(tmp_path, capsys):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b")  # (its config names another folder: not a difference)
    assert compare_experiments.main([str(a), str(b)]) == 0
    assert "1 checkpoints and 1 result files compared: identical" in capsys.readouterr().out
    shutil.rmtree(b)
    b = _run(tmp_path / "b", value=1.0 + 1e-7, text="u1 on\n")
    assert compare_experiments.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("epoch_0.pt.model.w: values differ")
    assert out[1] == "decode_test/attention/text: differs"
    assert compare_experiments.main([str(a), str(tmp_path / "none")]) == 2
