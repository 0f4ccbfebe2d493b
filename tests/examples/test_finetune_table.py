"""``examples/digits/s0/local/finetune_table.sh`` end to end: every fine-tuning variant of the
table in docs/training.md trained, decoded and tabulated, and the two resume checks on the
real model (heavy: about 13 minutes on 2 cores; last output in docs/experiments/heavy_tests.md).
It starts from the default run's first-phase model, so that run comes first
(``bash run.sh --stop_stage 4`` in the recipe)."""
from __future__ import annotations

import subprocess

import pytest

from tests.helpers import REPO

RECIPE = REPO / "examples" / "digits" / "s0"
BASE = RECIPE / "exp" / "conformer_cpu" / "synthetic" / "avg_3.pt"


@pytest.mark.slow
@pytest.mark.heavy  # (~12 min on 2 cores; last output: docs/experiments/heavy_tests.md)
def test_the_table_has_every_variant_and_resumed_runs_end_with_equal_weights(tmp_path):
    if not BASE.is_file():
        pytest.skip(f"needs the default run's first phase ({BASE.relative_to(REPO)}): bash run.sh --stop_stage 4")
    out = tmp_path / "table"
    proc = subprocess.run(["bash", "local/finetune_table.sh", "--out", str(out)], cwd=RECIPE, capture_output=True,
                          text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    print(proc.stdout)
    rows = [line for line in (out / "table.md").read_text().splitlines() if line.startswith("| ")][2:]
    assert [r.split(" | ")[0:2] for r in rows] == [[f"| {v}", d] for v in ("full", "frozen_encoder",
                                                                           "frozen_decoder", "lora4", "lora16")
                                                   for d in ("real", "+ synthetic")]
    for row in rows:
        ser = float(row.split(" | ")[3].split()[0])
        assert ser < 56.0, row  # every variant hears the unheard speaker better than the base model
    checks = [line for line in proc.stdout.splitlines() if line.startswith("* ")]
    assert len(checks) == 2 and all("(mid-epoch) and resumed: the same weights" in c for c in checks), checks
