"""bench/gpu_check.py without a GPU: the CPU dry run runs the stages end to end (so a GPU
run never meets a typo; the suite runs the test collection and the AISHELL stage, the heavy
test every stage), the environment check says in one line what is missing, the
budget skips what it cannot fit, a stage cut off at its deadline leaves what it measured,
and the carried corpus unpacks to the corpus the fixtures synthesize."""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from bench import gpu_check
from bench.gpu_stages.corpus import unpack_corpus
from tools.carried_corpus import pack_corpus
from bench.gpu_stages.process import GRACE_S, run_with_deadline
from tests.conftest import TINY_SEED, TINY_SIZES, unpack_carried_corpus
from tests.helpers import REPO, repo_env

STAGE_FILES = ("first_epoch", "gpu_tests", "digits", "aishell", "compile")


@pytest.fixture(scope="module")
def carried(tiny_corpus, tmp_path_factory) -> Path:
    """The fixtures' corpus packed as tools/prepare_gpu_carry.py packs it, serving as the
    digits corpus too (the dry run trains a few steps on it)."""
    archive = tmp_path_factory.mktemp("carry") / "gpu_corpus.tar.gz"
    manifest = {"tiny": {**TINY_SIZES, "seed": TINY_SEED}, "digits": {**TINY_SIZES, "seed": TINY_SEED}}
    pack_corpus({"tiny": tiny_corpus.root, "digits": tiny_corpus.root}, archive, manifest)
    return archive


def test_carried_corpus_unpacks_to_the_synthesized_corpus(tiny_corpus, carried, tmp_path):
    root = unpack_corpus(carried, tmp_path / "x", "tiny")
    for split, count in TINY_SIZES.items():
        scp = dict(line.split(maxsplit=1) for line in (root / split / "wav.scp").read_text().splitlines())
        original = dict(line.split(maxsplit=1) for line in tiny_corpus.splits[split].wav_scp.read_text().splitlines())
        assert scp.keys() == original.keys() and len(scp) == count
        for key, path in scp.items():
            assert Path(path).is_absolute() and Path(path).read_bytes() == Path(original[key]).read_bytes()
        assert (root / split / "text").read_text() == tiny_corpus.splits[split].text.read_text()
    corpus = unpack_carried_corpus(carried, tmp_path / "fixture")
    assert len(corpus.splits["train"].data_list.read_text().splitlines()) == TINY_SIZES["train"]
    wrong = tmp_path / "wrong.tar.gz"
    pack_corpus({"tiny": tiny_corpus.root}, wrong, {"tiny": {**TINY_SIZES, "seed": 8}})
    with pytest.raises(RuntimeError, match="made with"):
        unpack_carried_corpus(wrong, tmp_path / "refused")


def test_environment_check_says_in_one_line_what_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "soundfile", None)  # as on a GPU machine without the carried wheel
    assert gpu_check.main(["--corpus", str(tmp_path / "none.tar.gz"), "--work", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("gpu_check: cannot start: ")
    assert "soundfile does not import" in err and "pip install -q --no-index" in err and ".whl/*.whl" in err
    assert "python -m tools.prepare_gpu_carry" in err and "none.tar.gz is missing" in err
    import torch
    assert ("CUDA is not available" in err) != torch.cuda.is_available()
    assert not (tmp_path / "w").exists()


def test_the_budget_skips_the_stages_it_cannot_fit(carried, tmp_path, capsys):
    archive = tmp_path / "r.tar.gz"
    code = gpu_check.main(["--cpu_dry_run", "--corpus", str(carried), "--work", str(tmp_path / "w"),
                           "--archive", str(archive), "--budget", "10"])
    assert code == 0
    out = capsys.readouterr().out
    for stage in gpu_check.STAGES:
        assert f"{stage.name}  skipped: " in out and f"it needs {stage.minimum_s:.0f} s" in out
    with tarfile.open(archive) as tar:
        assert "gpu_check/summary.txt" in tar.getnames() and "gpu_check/environment.json" in tar.getnames()


def test_a_stage_cut_off_at_its_deadline_is_interrupted_and_its_group_killed(tmp_path):
    """The stage is interrupted at the deadline and writes what it has on SIGINT; a child it
    started that ignores SIGINT (as asrkit's loader workers do) is killed with the group."""
    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
              "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)'])\n"
              "open(sys.argv[1], 'w').write(str(child.pid))\n"
              "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    open(sys.argv[2], 'w').write('partial')\n")
    pid_file, partial = tmp_path / "pid", tmp_path / "partial"
    start = time.perf_counter()
    # (5 s: the script must be inside its try before the SIGINT, also on a loaded machine)
    done = run_with_deadline([sys.executable, "-c", script, str(pid_file), str(partial)], 5.0, tmp_path / "log")
    assert done.timed_out and time.perf_counter() - start < 5.0 + GRACE_S
    assert partial.read_text() == "partial"
    time.sleep(0.2)
    child = int(pid_file.read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def dry_run(carried: Path, tmp_path: Path, stages: tuple) -> tuple[dict, Path, str]:
    """``bench.gpu_check --cpu_dry_run`` over ``stages``; each stage's record, the work
    folder and stdout, after the checks every dry run passes (archive, statuses, table)."""
    archive, work = tmp_path / "results.tar.gz", tmp_path / "work"
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--cpu_dry_run", "--corpus", str(carried),
                           "--work", str(work), "--archive", str(archive), "--stages", ",".join(stages)],
                          capture_output=True, text=True, cwd=REPO, env=repo_env(), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert archive.stat().st_size < 16 * 2**20
    assert {f"gpu_check/{s}.json" for s in stages} <= names
    records = {s: json.loads((work / f"{s}.json").read_text()) for s in stages}
    assert all(r["status"] == "done" and r["returncode"] == 0 for r in records.values()), \
        {s: (r["status"], r["summary"]) for s, r in records.items()}
    table = proc.stdout[proc.stdout.index("stage "):]
    for stage in stages:
        assert f"\n{stage} " in table
    assert "ran on: CPU (dry run)" in table
    return records, work, proc.stdout


def check_gpu_tests(record: dict) -> None:
    tests = record["results"]["pytest"]["tests"]
    assert any("test_cuda_paths.py::" in t for t in tests) and any("test_amp.py::" in t for t in tests)
    assert all(t["outcome"] == "skipped" for t in tests.values())  # no CUDA here


def check_aishell(record: dict, work: Path, stdout: str) -> None:
    """The AISHELL stage (8/8's measurement) and the epoch projected from it."""
    aishell = record["results"]
    assert aishell["setup"]["data"]["units"] == 4233 and aishell["bf16"]["params_M"] > 0
    rate = aishell["bf16"]["real_frames_per_s"]
    assert rate == pytest.approx(aishell["bf16"]["real_frames"] / aishell["bf16"]["seconds"], rel=1e-2)
    matmuls = aishell["profile"]["encoder_matmuls"]
    assert matmuls["shapes"] > 0 and matmuls["isolated_share"] > 0
    workers = aishell["bf16_workers1"]  # a loader with a worker process, the trainer on one thread
    assert workers["real_frames_per_s"] > 0 and workers["trainer_threads"] == 1 and workers["variant"]["workers"] == 1
    assert "Self CPU" in (work / "profile_bf16.txt").read_text()
    projection = json.loads((work / "projection.json").read_text())
    assert projection["epoch_seconds"]["bf16"] == pytest.approx(150 * 360_000 / rate, rel=1e-3)
    assert "150 h x 360,000 frames/h / real frames/s" in stdout
    assert "\nprojection " in stdout[stdout.index("stage "):]


def check_first_epoch(record: dict, stdout: str) -> None:
    """Issue 57's first-epoch stage: a variant in a process of its own and one in the stage's,
    each a first epoch with its shapes, padding, new/seen step times and projections."""
    r = record["results"]
    plans = r["setup"]["aishell1_epoch_plan_one_gpu"]
    assert plans["bucket_frames"]["shapes"] <= 40 and plans["dynamic"]["shapes"] > 100
    assert r["setup"]["variants"] == ["bf16_bucket", "bf16_dynamic"]
    for name in ("bf16_bucket", "bf16_dynamic"):
        v = r[name]
        fe = v["first_epoch"]
        assert fe["steps"] >= 1 and fe["real_frames_per_s"] > 0 and fe["distinct_shapes"] >= 1, (name, v)
        assert 0 <= fe["padding_share"] < 1 and v["steps"]["new_shape_steps"] >= 1 and fe["first_batch_wait_s"] >= 0
        assert v["variant"]["cudnn_sdpa"] is False and v["cudnn"] is True  # asrkit's default; cuDNN on
        assert v["cudnn_benchmark"] is False and v["host_syncs"]["syncs_per_step"] is None  # counted on CUDA only
        assert v["projection"]["epoch_s_from_first_epoch_rate"] == pytest.approx(54_000_000 / fe["real_frames_per_s"],
                                                                                 rel=1e-3)
    assert "process_seconds" in r["bf16_bucket"] and r["bf16_bucket"]["variant"]["batch_type"] == "bucket_frames"
    assert r["bf16_dynamic"]["variant"]["batch_type"] == "dynamic"
    assert "first_epoch  AISHELL-1 plan on one GPU: bucket_frames:" in stdout


@pytest.mark.slow
def test_cpu_dry_run_of_the_test_and_aishell_stages(carried, tmp_path):
    """The suite's dry run: the GPU tests' collection and the AISHELL measurement with its
    projection; every stage, issue 57's first epochs too: the heavy test below (the first
    epochs' child process took the suite's test from 41 s to 150 s on 2 shared cores)."""
    records, work, stdout = dry_run(carried, tmp_path, ("gpu_tests", "aishell"))
    check_gpu_tests(records["gpu_tests"])
    check_aishell(records["aishell"], work, stdout)


@pytest.mark.slow
@pytest.mark.heavy  # (~35 s on 2 cores before the first_epoch stage, 69 s with it; last output: docs/experiments/heavy_tests.md)
def test_cpu_dry_run_runs_every_stage(carried, tmp_path):
    records, work, stdout = dry_run(carried, tmp_path, STAGE_FILES)
    check_first_epoch(records["first_epoch"], stdout)
    check_gpu_tests(records["gpu_tests"])
    check_aishell(records["aishell"], work, stdout)
    digits = records["digits"]["results"]
    for name in ("fp32", "bf16", "fp16"):
        assert digits[name]["steps"] == 3 and digits[name]["nonfinite_steps"] == 0 and digits[name]["cv_loss"] > 0
        assert digits[name]["host_syncs"]["syncs_per_step"] is None  # counted on CUDA only
    assert "cv_vs_fp32" in digits["bf16"] and "cv_vs_fp32" in digits["fp16"]
    assert "compiled" in records["compile"]["results"] and "eager" in records["compile"]["results"]
