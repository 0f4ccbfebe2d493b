"""``tools/setup_env.sh`` stops the command that sources it when installing fails (a full
disk, no network): bash ignores ``set -e`` in a script sourced as ``. setup_env.sh || exit 1``,
so a failed ``pip install`` once let the recipe start without numpy or torch."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def fake_venv(root: Path, pip_status: int) -> Path:
    """A venv whose python runs the real one, except that ``-m pip`` exits ``pip_status``."""
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text("#!/usr/bin/env bash\n"
                      f'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "ERROR: [Errno 28] No space left on device" >&2; '
                      f"exit {pip_status}; fi\n"
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return root / "venv"


def source_then_echo(venv: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ASRKIT_VENV": str(venv), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", ". tools/setup_env.sh || exit 7; echo RECIPE-STARTED"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_failed_install_stops_the_caller_with_one_clear_line(tmp_path):
    proc = source_then_echo(fake_venv(tmp_path, pip_status=1))
    assert proc.returncode == 7 and "RECIPE-STARTED" not in proc.stdout
    assert "[setup] error: installing the requirements" in proc.stderr
    assert not (tmp_path / "venv" / ".asrkit-installed").exists()  # retried next time


def test_a_successful_install_goes_on_and_stamps_the_venv(tmp_path):
    proc = source_then_echo(fake_venv(tmp_path, pip_status=0))
    assert proc.returncode == 0 and "RECIPE-STARTED" in proc.stdout, proc.stderr
    assert (tmp_path / "venv" / ".asrkit-installed").read_text().strip()
