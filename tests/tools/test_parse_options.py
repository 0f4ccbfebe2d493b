"""tools/parse_options.sh: --name value for any variable the script declares."""
from __future__ import annotations

import subprocess

from tests.helpers import REPO

SCRIPT = """stage=0
stop_stage=6
dir="exp/base"
. "{po}" || exit 3
printf '%s|%s|%s|%s\\n' "$stage" "$stop_stage" "$dir" "$*"
"""


def run(tmp_path, *args):
    script = tmp_path / "my run.sh"
    script.write_text(SCRIPT.format(po=REPO / "tools" / "parse_options.sh"))
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True)


def test_sets_declared_variables_keeping_spaces(tmp_path):
    proc = run(tmp_path, "--stage", "3", "--stop-stage=4", "--dir", "exp/a b", "extra")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3|4|exp/a b|extra"


def test_unknown_or_incomplete_options_fail(tmp_path):
    bad = run(tmp_path, "--stgae", "3")
    assert bad.returncode == 3 and "unknown option --stgae" in bad.stderr
    missing = run(tmp_path, "--stage")
    assert missing.returncode == 3 and "needs a value" in missing.stderr
    helped = run(tmp_path, "--help")
    assert helped.returncode == 3 and "--stop_stage 6" in helped.stderr


def test_values_are_not_evaluated(tmp_path):
    proc = run(tmp_path, "--dir", "$(touch pwned)")
    assert proc.stdout.strip().split("|")[2] == "$(touch pwned)"
    assert not (tmp_path / "pwned").exists()
