"""The package reads as a map: small modules, and no dependency of inference on training."""
from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import REPO

MAX_LINES = 400


def test_every_module_stays_under_400_lines():
    too_long = {str(p.relative_to(REPO)): n for p in sorted(Path(REPO, "asrkit").rglob("*.py"))
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


def test_one_atomic_writer():
    """Temp-file-and-rename writes go through asrkit.io.files, nowhere else."""
    rename = re.compile(r"\b(os\.replace|os\.rename|\w*tmp\w*\.(replace|rename))\(")
    writers = [str(p.relative_to(REPO)) for folder in ("asrkit", "tools") for p in sorted(Path(REPO, folder).rglob("*.py"))
               if rename.search(p.read_text(encoding="utf-8")) and p.name != "files.py"]
    assert not writers, writers
