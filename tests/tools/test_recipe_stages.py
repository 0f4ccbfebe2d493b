"""The shared recipe stages' rules for redoing work (tools/recipe_stages.sh), with the
Python tools replaced by a stub that records its calls: the stale-average trap (training
longer, then rerunning stage 5, must not decode the old average) and units rebuilt when
their options or the training text change."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import REPO

STUB = r"""
python() { echo "python $*" >> calls.log; case "$*" in
  *average_model*) echo averaged > "${@: -1}" ;;
  *bin.export*) echo exported > "${@: -1}" ;;
  *make_units.py*) echo "<blank> 0" > "${@: -1}" ;;
  esac; }
"""


def run_stages(cwd: Path, body: str) -> subprocess.CompletedProcess:
    script = (f". '{REPO}/tools/recipe_stages.sh'\n{STUB}\n"
              "dir=exp; average_num=2; average_mode=best; test_sets=''; data_type=raw\n"
              "decode_checkpoint=exp/avg_2.pt\n" + body)
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc


def calls(cwd: Path) -> list[str]:
    log = cwd / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def touch_later(path: Path, than: Path) -> None:
    """Give ``path`` an mtime 2 s after ``than``'s (no sleeping, no timestamp-resolution race)."""
    path.touch()
    t = than.stat().st_mtime + 2
    os.utime(path, (t, t))


def test_stage_5_reaverages_after_more_training_and_stage_6_reexports(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    for e in (0, 1):
        (exp / f"epoch_{e}.pt").write_text("weights")
    run_stages(tmp_path, "stage_average_decode_score; stage_export")
    first = calls(tmp_path)
    assert any("average_model" in c for c in first) and any("bin.export" in c for c in first)

    run_stages(tmp_path, "stage_average_decode_score; stage_export")  # nothing new: nothing redone
    assert calls(tmp_path) == []

    touch_later(exp / "epoch_2.pt", exp / "avg_2.pt")  # trained one more epoch
    run_stages(tmp_path, "stage_average_decode_score; stage_export")
    again = calls(tmp_path)
    assert any("average_model" in c for c in again) and any("bin.export" in c for c in again), again


def test_an_explicit_checkpoint_is_never_overwritten_by_an_average(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    chosen = exp / "epoch_0.pt"
    chosen.write_text("weights")
    touch_later(exp / "epoch_1.pt", chosen)
    run_stages(tmp_path, "decode_checkpoint=exp/epoch_0.pt; stage_average_decode_score")
    assert not any("average_model" in c for c in calls(tmp_path))
    assert chosen.read_text() == "weights"


def test_units_are_rebuilt_when_options_or_text_change(tmp_path):
    text = tmp_path / "data" / "train" / "text"
    text.parent.mkdir(parents=True)
    text.write_text("u1 a b\n")
    units = "data/dict/units.txt"
    run_stages(tmp_path, f"stage_units chars {units}")
    assert len(calls(tmp_path)) == 1
    run_stages(tmp_path, f"stage_units chars {units}")
    assert calls(tmp_path) == []
    run_stages(tmp_path, f"stage_units bpe {units} --bpe 30")
    assert calls(tmp_path) == [f"python tools/make_units.py --bpe 30 data/train/text {units}"]
    text.write_text("u1 a b c\n")
    run_stages(tmp_path, f"stage_units bpe {units} --bpe 30")
    assert len(calls(tmp_path)) == 1
