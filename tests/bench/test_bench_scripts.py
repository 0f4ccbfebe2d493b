"""The README's speed figures come from bench/ scripts: they must run and report every
figure they promise (here on the tiny corpus and a tiny model, a few steps)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def bench(script: str, *args, cwd: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / script), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture()
def pipeline_args(tiny_experiment, tmp_path):
    cfg = tiny_experiment.config(tmp_path / "tiny.yaml")
    return ["--config", cfg, "--data", tiny_experiment.corpus.splits["train"].data_list,
            "--units", tiny_experiment.units, "--cmvn", tiny_experiment.cmvn, "--num_workers", "0"]


def test_train_throughput_reports_rate_split_flops_and_profile(pipeline_args, tmp_path):
    out = tmp_path / "tp.json"
    [result] = bench("train_throughput.py", *pipeline_args, "--threads", 1, "--steps", 3, "--warmup", 1,
                     "--profile", 1, "--json", out, cwd=tmp_path)
    assert json.loads(out.read_text()) == result
    assert result["real_frames_per_s"] > 0 and result["utts_per_s"] > 0
    assert 0.0 <= result["padding_share"] < 1.0
    assert set(result["split"]) == {"data", "forward", "backward", "optimizer"}
    assert sum(result["split"].values()) == pytest.approx(1.0, abs=0.02)
    # training FLOPs are 3x the forward's, and the share of peak follows from them
    assert result["train_MFLOP_per_frame"] == pytest.approx(3 * result["fwd_MFLOP_per_frame"])
    expected_share = result["real_frames_per_s"] * result["train_MFLOP_per_frame"] / 1e3 / result["matmul_peak_GFLOPs"]
    assert result["share_of_peak"] == pytest.approx(expected_share, rel=1e-6)
    shares = result["profile"]["category_share"]
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01) and shares["matmul"] > 0
    assert result["profile"]["top_ops"]


@pytest.mark.slow
def test_ddp_scaling_compares_two_gloo_processes_with_one(pipeline_args, tmp_path):
    rows = bench("ddp_scaling.py", *pipeline_args, "--procs", 1, 2, "--threads", 1, "--steps", 2,
                 "--warmup", 1, "--gradient_as_bucket_view", cwd=tmp_path)
    assert [r["procs"] for r in rows] == [1, 2]
    one, two = rows
    assert one["efficiency"] == pytest.approx(1.0)
    assert two["efficiency"] == pytest.approx(two["real_frames_per_s"] / (2 * one["real_frames_per_s"]))
    for r in rows:
        assert r["real_frames_per_s"] > 0 and r["step_s"] > 0 and r["step_s_no_sync"] > 0
        assert r["allreduce_overhead"] == pytest.approx(1 - r["step_s_no_sync"] / r["step_s"])
        assert r["gradient_as_bucket_view"] is True


@pytest.mark.slow  # (a real benchmark run: 12-13 s on 2 cores, too close to the 20 s guard under load)
def test_data_pipeline_runs_as_documented_and_prints_every_table(tiny_corpus, tmp_path):
    """``bench/data_pipeline.py --help``, then its documented run (here on the tiny corpus's
    list instead of a synthesized one): the step breakdown used to die with
    ``KeyError: 'epoch'`` in speed_perturb (its samples lacked the epoch)."""
    script = [sys.executable, str(REPO / "bench" / "data_pipeline.py")]
    usage = subprocess.run([*script, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert usage.returncode == 0 and "--data_list" in usage.stdout
    proc = subprocess.run([*script, "--data_list", tiny_corpus.splits["train"].data_list, "--repeats", "1",
                           "--workdir", tmp_path / "work"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "| raw | 48 |" in out and "| shard | 48 |" in out
    assert "speed perturbation of a 2 s utterance: median" in out
    steps = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")}
    assert {"load", "tokenize", "speed_perturb", "fbank", "spec_aug"} <= steps
