"""Stage a of the GPU check: the suite's GPU tests (every test file that marks tests
``pytest.mark.gpu``), run with ``-m gpu`` on the carried corpus (``ASRKIT_TEST_CORPUS``:
the fixtures unpack it instead of synthesizing with espeak-ng).  Outcomes come from
pytest's JUnit report, or from its ``-v`` lines when the stage was cut off.

    python -m bench.gpu_stages.gpu_tests --out DIR --seconds 110 --corpus ARCHIVE [--cpu_dry_run]
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.gpu_stages.common import StageRecord, stage_args
from bench.gpu_stages.process import run_with_deadline

REPO = Path(__file__).resolve().parents[2]
GPU_MARK = re.compile(r"pytest\.mark\.gpu\b")
VERBOSE_LINE = re.compile(r"(tests/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")


def gpu_test_files(root: Path = REPO) -> list[str]:
    """The test files (relative to ``root``) that mark tests ``pytest.mark.gpu``."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                  if GPU_MARK.search(p.read_text(encoding="utf-8")))


def junit_outcomes(xml: Path) -> dict[str, dict]:
    """``{test id: {"outcome", "seconds", "message"}}`` from a JUnit report."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "").splitlines()[0][:300] if child.get("message") else ""
                break
        out[test] = {"outcome": outcome, "seconds": round(float(case.get("time", 0)), 2), "message": message}
    return out


def verbose_outcomes(log_text: str) -> dict[str, dict]:
    """Outcomes from pytest's ``-v`` lines (a run cut off before its report)."""
    return {m.group(1): {"outcome": m.group(2).lower(), "seconds": None, "message": ""}
            for m in VERBOSE_LINE.finditer(log_text)}


def main(argv=None) -> int:
    p = stage_args(__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, required=True, help="the carried corpus archive")
    p.add_argument("--workers", type=int, default=6, help="pytest-xdist workers on the GPU (0: none)")
    args = p.parse_args(argv)
    record = StageRecord(args.out, "gpu_tests")
    files = gpu_test_files()
    xml, log = args.out / "gpu_tests.xml", args.out / "gpu_tests.log"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider", f"--junitxml={xml}", *files]
    if args.workers and not args.cpu_dry_run and importlib.util.find_spec("xdist") is not None:
        # test by test, not file by file: test_cuda_paths.py's long runs would queue on one worker
        cmd[3:3] = ["-n", str(args.workers), "--dist", "load"]
    env = dict(os.environ, ASRKIT_TEST_CORPUS=str(args.corpus.resolve()),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    record.record("command", {"argv": cmd[1:], "files": files})
    done = run_with_deadline(cmd, args.seconds, log, env=env, cwd=REPO)
    tests = junit_outcomes(xml) if xml.is_file() else verbose_outcomes(log.read_text(encoding="utf-8", errors="replace"))
    counts: dict[str, int] = {}
    for t in tests.values():
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    record.record("pytest", {"returncode": done.returncode, "seconds": done.seconds, "cut_off": done.timed_out,
                             "counts": counts, "tests": tests})
    bad = [f"{k.split('::')[-1]}: {v['message'][:80]}" for k, v in tests.items() if v["outcome"] in ("failed", "error")]
    skip_reasons = sorted({v["message"] for v in tests.values() if v["outcome"] == "skipped"})
    line = (f"gpu tests  {', '.join(f'{n} {k}' for k, n in sorted(counts.items())) or 'none ran'} in {done.seconds:.0f} s"
            f"{' (cut off at the time limit)' if done.timed_out else ''}")
    if bad:
        line += "; failed: " + "; ".join(bad[:6])
    elif skip_reasons and not counts.get("passed"):
        line += "; skipped: " + "; ".join(r[:60] for r in skip_reasons[:3])
    record.summary(line)
    record.finish("done" if done.returncode in (0, 5) and not done.timed_out else "failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
