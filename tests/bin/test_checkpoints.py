"""``python -m asrkit.bin.checkpoints``: the checkpoint-naming rule for shell scripts, one
path per line; bad input one line and status 2; no torch imported."""
from __future__ import annotations

import os
import subprocess
import sys

import yaml

from asrkit.bin.checkpoints import main
from tests.helpers import REPO


def test_each_subcommand_prints_one_path_per_line(tmp_path, capsys):
    for name, step, loss in (("epoch_0.pt", 4, 2.0), ("step_6.pt", 6, None), ("epoch_1.pt", 8, 1.0)):
        (tmp_path / name).write_bytes(b"weights")
        (tmp_path / name).with_suffix(".yaml").write_text(yaml.safe_dump({"step": step, "cv_loss": loss}))
    os.utime(tmp_path / "epoch_0.pt", (10**9, 10**9))  # the newest file: not the newest checkpoint
    (tmp_path / "avg_2.pt").write_bytes(b"weights")

    def lines(*argv: str) -> list[str]:
        assert main(list(argv)) == 0
        return capsys.readouterr().out.splitlines()

    assert lines("kind", "exp/avg_best.pt") == ["average"] and lines("kind", "final.pt") == ["other"]
    assert lines("kind", "step_3.pt") == ["step"]
    d = str(tmp_path)
    assert lines("list", d) == [f"{d}/epoch_0.pt", f"{d}/step_6.pt", f"{d}/epoch_1.pt"]
    assert lines("list", d, "--kind", "epoch") == [f"{d}/epoch_0.pt", f"{d}/epoch_1.pt"]
    assert lines("averaged", d) == [f"{d}/avg_2.pt"]
    assert lines("decode", d) == [f"{d}/avg_2.pt"]
    (tmp_path / "avg_2.pt").unlink()
    assert lines("decode", d) == [f"{d}/epoch_1.pt"]
    assert lines("average", d, "--num", "1", "--mode", "best") == [f"{d}/epoch_1.pt"]
    assert lines("average", d, "--num", "5", "--mode", "last") == [f"{d}/epoch_0.pt", f"{d}/epoch_1.pt"]


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    for argv in (["list", str(tmp_path / "missing")], ["decode", str(tmp_path)],
                 ["average", str(tmp_path), "--num", "2"]):
        assert main(argv) == 2, argv
        out = capsys.readouterr()
        assert out.out == "" and len(out.err.splitlines()) == 1 and out.err.startswith("error: "), out


def test_runs_without_torch(tmp_path):
    """The recipes' shell stages call it: it must start fast, so torch stays unimported."""
    code = ("import sys, runpy; sys.argv = ['checkpoints', 'list', sys.argv[1]]\n"
            "try:\n    runpy.run_module('asrkit.bin.checkpoints', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
