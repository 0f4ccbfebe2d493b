"""The README's speed figures come from bench/ scripts: each must run as documented and
report figures that agree with what the test knows on its own -- the fbank frames and
utterances of the lists it hands in (counted here from the wav files), the wall clock of
the process (the bench's timed interval lies inside it), FLOPs counted here, the executor's
documented collectives -- not figures recomputed from the same output (here on the tiny
corpus and tiny models, a few steps)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile as sf
import torch

from tests.helpers import REPO, distinct_utterance_list, repo_env, venv_env

# the tiny experiment's fbank: the documented defaults (docs/data.md), 25 ms windows every 10 ms
FRAME_LENGTH_S, FRAME_SHIFT_S = 0.025, 0.010
TRAIN_UTTS = 8  # the tiny config's static batch size: one batch per epoch (per rank: half each of 2)
PROFILE_CATEGORIES = {"convolution", "matmul", "softmax", "ctc", "dropout masks", "norms", "elementwise",
                      "memory", "other"}


def bench(script: str, *args, cwd: Path, env: dict | None = None) -> tuple[str, float]:
    """Run ``bench/<script>`` (in ``env``, default :func:`repo_env`); its stdout and the
    process's wall-clock seconds."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(REPO / "bench" / script), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env or repo_env(), timeout=300)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, wall


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def wavs(data_list: Path) -> list[str]:
    return [json.loads(line)["wav"] for line in Path(data_list).read_text().splitlines()]


def fbank_frames(wav: str) -> int:
    """Kaldi fbank frames (snip_edges) of a wav file, from its sample count."""
    info = sf.info(wav)
    window, shift = int(info.samplerate * FRAME_LENGTH_S), int(info.samplerate * FRAME_SHIFT_S)
    return 0 if info.frames < window else 1 + (info.frames - window) // shift


def audio_seconds(files) -> float:
    return sum(sf.info(w).duration for w in files)


@pytest.fixture()
def train_list(tiny_experiment, tmp_path) -> Path:
    return distinct_utterance_list(tiny_experiment.corpus.splits["train"].data_list, tmp_path / "train.list",
                                   TRAIN_UTTS)


@pytest.fixture()
def pipeline_args(tiny_experiment, train_list, tmp_path):
    cfg = tiny_experiment.config(tmp_path / "tiny.yaml")
    return ["--config", cfg, "--data", train_list, "--units", tiny_experiment.units,
            "--cmvn", tiny_experiment.cmvn, "--num_workers", "0"]


def first_batch_flops(pipeline_argv) -> tuple[float, list[int], int]:
    """FLOPs of one forward of the pipeline's model on its first batch, counted here with
    FlopCounterMode; the batch's real frame counts; the model's parameters."""
    import argparse
    from torch.utils.flop_counter import FlopCounterMode
    from bench.pipeline import add_pipeline_args, build_pipeline
    parser = argparse.ArgumentParser()
    add_pipeline_args(parser)
    pipe = build_pipeline(parser.parse_args(list(map(str, pipeline_argv))))
    batch = pipe.next_batch()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        pipe.model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
    return (counter.get_total_flops(), batch["feats_lengths"].tolist(),
            sum(p.numel() for p in pipe.model.parameters()))


def test_train_throughput_counts_the_frames_it_trained_and_the_flops_of_its_model(
        pipeline_args, train_list, tmp_path):
    lengths = [fbank_frames(w) for w in wavs(train_list)]
    assert len(lengths) == TRAIN_UTTS
    out = tmp_path / "tp.json"
    stdout, wall = bench("train_throughput.py", *pipeline_args, "--threads", 1, "--steps", 2, "--warmup", 1,
                         "--profile", 1, "--json", out, cwd=tmp_path)
    [result] = json_lines(stdout)
    assert json.loads(out.read_text()) == result
    # each step is one batch of the whole list: the 2 timed steps trained every utterance twice
    assert result["real_frames"] == 2 * sum(lengths) and result["utterances"] == 2 * len(lengths)
    assert 0 < result["seconds"] < wall  # timed inside the process's lifetime
    assert result["real_frames_per_s"] == pytest.approx(2 * sum(lengths) / result["seconds"])
    assert result["utts_per_s"] == pytest.approx(2 * len(lengths) / result["seconds"])
    assert result["real_frames_per_s"] > 2 * sum(lengths) / wall
    assert result["padding_share"] == pytest.approx(1 - sum(lengths) / (len(lengths) * max(lengths)))
    # the four phases partition the timed interval
    assert set(result["split"]) == {"data", "forward", "backward", "optimizer"}
    assert all(v > 0 for v in result["split"].values())
    assert sum(result["split"].values()) == pytest.approx(1.0, abs=0.02)
    # FLOPs: counted here on the same model's forward over the same (whole-list) batch
    flops, batch_lengths, params = first_batch_flops(pipeline_args)
    assert sorted(batch_lengths) == sorted(lengths)
    # (counted with gradients on, inside the training step: attention's kernel choice then counts ~5 % more)
    assert result["fwd_MFLOP_per_frame"] == pytest.approx(flops / sum(lengths) / 1e6, rel=0.1)
    # forward + backward counted over one training step: the backward of a matmul is two matmuls
    assert 2.5 < result["train_MFLOP_per_frame"] / result["fwd_MFLOP_per_frame"] < 3.5
    assert result["params_M"] == pytest.approx(params / 1e6)
    train_flops_per_s = 2 * result["train_MFLOP_per_frame"] * 1e6 * sum(lengths) / result["seconds"]
    assert result["share_of_peak"] == pytest.approx(train_flops_per_s / (result["matmul_peak_GFLOPs"] * 1e9))
    assert 0 < result["share_of_peak"] < 1
    # profile: the documented categories; the tiny conformer's own ops land where they belong
    shares = result["profile"]["category_share"]
    assert set(shares) <= PROFILE_CATEGORIES
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)
    for category in ("matmul", "convolution", "norms", "softmax", "ctc"):  # linears, conv2d/depthwise, ...
        assert shares.get(category, 0) > 0, category
    top = {op["op"]: op["share"] for op in result["profile"]["top_ops"]}
    assert all(op.startswith("aten::") for op in top) and "aten::mm" in top
    assert shares["matmul"] >= sum(s for op, s in top.items() if op in ("aten::mm", "aten::addmm", "aten::bmm"))
    assert shares["convolution"] >= sum(s for op, s in top.items() if "convolution" in op)


@pytest.mark.slow
@pytest.mark.heavy  # (two torchrun launches: 20-45 s on 2 shared cores; last output: docs/experiments/heavy_tests.md)
def test_ddp_scaling_compares_two_gloo_processes_with_one(pipeline_args, train_list, tmp_path):
    frames_per_step = sum(fbank_frames(w) for w in wavs(train_list))
    out = tmp_path / "ddp.jsonl"
    stdout, wall = bench("ddp_scaling.py", *pipeline_args, "--procs", 1, 2, "--threads", 1, "--steps", 2,
                         "--warmup", 1, "--gradient_as_bucket_view", "--json", out, cwd=tmp_path)
    rows = json_lines(stdout)
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    assert [r["procs"] for r in rows] == [1, 2]
    for r in rows:
        # one process trains the whole list per step, two train half each: the frames summed
        # over ranks per step are the list's frames either way, with and without the all-reduce
        assert r["real_frames_per_s"] * r["step_s"] == pytest.approx(frames_per_step)
        assert r["real_frames_per_s_no_sync"] * r["step_s_no_sync"] == pytest.approx(frames_per_step)
        assert 0 < r["step_s"] and 0 < r["step_s_no_sync"]
        assert r["step_s"] * r["steps"] + r["step_s_no_sync"] * r["steps"] < wall
        assert r["gradient_as_bucket_view"] is True
    # the derived figures, by the documented definitions, from the rates checked above
    one, two = rows
    assert one["efficiency"] == pytest.approx(1.0)
    assert two["efficiency"] == pytest.approx(two["real_frames_per_s"] / (2 * one["real_frames_per_s"]))
    assert two["allreduce_overhead"] == pytest.approx(1 - two["step_s_no_sync"] / two["step_s"])
    for r in rows:  # the FLOP share: the step's FLOPs per frame at the rate, over the summed peaks
        assert r["train_flops_per_frame"] > 1e5 and r["matmul_peak_GFLOPs"] > 0
        assert r["share_of_peak"] == pytest.approx(
            r["real_frames_per_s"] * r["train_flops_per_frame"] / (r["matmul_peak_GFLOPs"] * 1e9))
        assert 0 < r["share_of_peak"] < 1
    # the same model and data: the same FLOPs per frame whether one process counts or two
    assert two["train_flops_per_frame"] == pytest.approx(one["train_flops_per_frame"], rel=0.3)


@pytest.mark.heavy  # (11-20 s; the executor's one collective a step is the suite's
# tests/train/test_collectives_per_step.py; last output: docs/experiments/heavy_tests.md)
def test_step_overhead_counts_the_one_collective_the_executor_makes_per_step(tmp_path):
    """docs/performance.md: the executor's only Python-level collective while training is the
    step all-reduce, one per optimizer step whatever ``accum_grad`` (5 per step at
    accum_grad 4 before the has-next flag rode on it)."""
    stdout, wall = bench("step_overhead.py", "--procs", 2, "--accum_grad", 2, "--steps", 2, "--warmup", 1,
                         cwd=tmp_path)
    [r] = json_lines(stdout)
    assert r["ranks"] == 2 and r["accum_grad"] == 2
    assert r["collectives_per_step"] == 1
    assert 0 < r["ms_per_step"] and 2 * r["ms_per_step"] / 1000 < wall


def test_decode_rtf_runs_the_documented_random_init_command(tiny_experiment, tmp_path):
    """docs/performance.md's command (the small conformer at random init, 19 units) on the
    tiny corpus's test list."""
    data_list = tiny_experiment.corpus.splits["test"].data_list
    stdout, wall = bench("decode_rtf.py", "--data", data_list, "--config", REPO / "conf/train_conformer_small.yaml",
                         "--vocab_size", 19, "--modes", "attention_rescoring", "--beam_size", 10,
                         "--batch_size", 16, "--threads", 1, cwd=tmp_path)
    report = json.loads(stdout)
    assert report["model"] == "random init (pessimistic)"
    assert round(report["parameters"] / 1e6, 2) == 4.62 and report["vocab_size"] == 19  # as docs/performance.md
    assert report["modes"] == ["attention_rescoring"]
    files = wavs(data_list)
    audio = audio_seconds(files)
    assert report["utterances"] == len(files) == 12
    assert report["audio_s"] == pytest.approx(audio, abs=0.05)
    assert 0 < report["model_s"] < wall
    # (rtf and fbank_rtf are rounded to 4 decimals)
    assert 0 < report["rtf"] and 0 < report["fbank_rtf"]
    assert (report["rtf"] + report["fbank_rtf"] - 1e-4) * audio < wall


def test_decode_rtf_times_a_checkpoint_decoding_every_utterance_once(tiny_experiment, tmp_path, monkeypatch,
                                                                     capsys):
    """docs/decoding.md's command (``--config train.yaml --checkpoint``, no ``--vocab_size``:
    the units come from the checkpoint), in all four modes, run in this process with the
    bench's decode and fbank calls observed: the timed decode calls get every utterance once,
    with its full fbank frames and the checkpoint's weights, and the reported times cover them."""
    import bench.decode_rtf as bench_rtf
    from asrkit.config import load_config
    from asrkit.decode.modes import runnable_modes
    from asrkit.models import build_model
    from asrkit.text import build_tokenizer

    config = tiny_experiment.config(tmp_path / "train.yaml")
    cfg = load_config(config)
    vocab = build_tokenizer(cfg).vocabulary
    torch.manual_seed(0)
    model = build_model(cfg, 40, vocab)
    with torch.no_grad():
        model.ctc.ctc_lo.bias[0] += 1.5  # mostly blank, as a trained model: prefix search skips frames
    checkpoint = tmp_path / "avg_3.pt"
    torch.save({"model": model.state_dict()}, checkpoint)
    MODES = tuple(runnable_modes(model))  # the four CTC/attention modes

    decoded, fbanks = [], []

    def observed(record, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            record.append((time.perf_counter() - start, args))
            return out
        return wrapper

    monkeypatch.setattr(bench_rtf, "decode", observed(decoded, bench_rtf.decode))
    monkeypatch.setattr(bench_rtf, "compute_fbank", observed(fbanks, bench_rtf.compute_fbank))
    data_list = tiny_experiment.corpus.splits["test"].data_list
    threads = torch.get_num_threads()
    start = time.perf_counter()
    try:
        assert bench_rtf.main(["--data", str(data_list), "--config", str(config), "--checkpoint", str(checkpoint),
                               "--modes", *MODES, "--beam_size", "4", "--batch_size", "4", "--threads", "1"]) == 0
    finally:
        wall = time.perf_counter() - start
        torch.set_num_threads(threads)
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == f"checkpoint {checkpoint}" and report["vocab_size"] == vocab.size == 19
    assert report["modes"] == list(MODES)
    files = wavs(data_list)
    audio = audio_seconds(files)
    assert report["utterances"] == len(files) and report["audio_s"] == pytest.approx(audio, abs=0.05)
    # features: one fbank per utterance, inside the reported fbank time
    assert len(fbanks) == len(files)
    assert report["fbank_rtf"] * audio >= sum(s for s, _ in fbanks) - 1e-4 * audio
    # decoding: a warm-up call, then every utterance once with its full frames, all modes, the checkpoint
    _warmup, *timed = decoded
    assert sorted(n for _, (_, _, lengths, _) in timed for n in lengths.tolist()) == \
        sorted(fbank_frames(w) for w in files)
    assert len(timed) == 3  # 12 utterances, batches of 4
    for _, (decoding_model, _, _, options) in decoded:
        assert options.modes == MODES
        torch.testing.assert_close(decoding_model.ctc.ctc_lo.bias, model.ctc.ctc_lo.bias, rtol=0, atol=0)
    timed_s = sum(s for s, _ in timed)
    assert timed_s - 1e-4 * audio <= report["rtf"] * audio < wall


@pytest.mark.slow  # (a real benchmark run: 12-16 s on 2 cores, too close to the 20 s guard under load)
def test_data_pipeline_runs_as_documented_and_prints_every_table(tiny_experiment, tmp_path):
    """``bench/data_pipeline.py --help``, then its documented run with ``--model_config`` (here
    on the tiny corpus's list instead of a synthesized one, and the tiny model): the step
    breakdown used to die with ``KeyError: 'epoch'`` in speed_perturb (its samples lacked the
    epoch), and the trainer steps trained an empty batch on lists shorter than 64 utterances.
    Run with the venv alone (no ``PYTHONPATH``), as the docs show it."""
    script = [sys.executable, str(REPO / "bench" / "data_pipeline.py")]
    usage = subprocess.run([*script, "--help"], capture_output=True, text=True, cwd=tmp_path, env=venv_env(), timeout=60)
    assert usage.returncode == 0 and "--data_list" in usage.stdout and "--model_config" in usage.stdout
    data_list = tiny_experiment.corpus.splits["train"].data_list
    config = tiny_experiment.config(tmp_path / "tiny.yaml")
    out, wall = bench("data_pipeline.py", "--data_list", data_list, "--repeats", 1, "--workdir", tmp_path / "work",
                      "--model_config", config, cwd=tmp_path, env=venv_env())
    files = wavs(data_list)
    audio = audio_seconds(files)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.splitlines() if line.startswith("| ") and not line.startswith("| input")
            and not line.startswith("| step")}
    for name in ("raw", "shard"):
        utts, audio_s, ups, aps, best = rows[name]
        assert int(utts) == len(files) == 48 and abs(int(audio_s) - audio) <= 0.51
        # the timed epochs ran inside the process: at least (count / its lifetime) per second
        assert float(ups) >= len(files) / wall and float(aps) >= audio / wall and float(best) >= float(aps)
    steps = {k: float(v[0]) for k, v in rows.items() if k not in ("raw", "shard")}
    assert set(steps) == {"load", "tokenize", "resample", "filter_lengths", "speed_perturb", "fbank", "spec_aug"}
    assert 0 < sum(steps.values()) * len(files) / 1000 < wall
    median, p90 = map(float, re.search(r"2 s utterance: median ([\d.]+) ms, p90 ([\d.]+) ms", out).groups())
    assert 0 < median <= p90 and 200 * median / 1000 < wall
    # 3 timed training steps of 16 utterances after a warm-up one: the whole list once, each
    # utterance speed-perturbed by 0.9, 1.0 or 1.1 (fbank frames / 100 fall short of its
    # duration by less than a window)
    rate, trained, secs = map(float, re.search(
        rf"training steps of {re.escape(str(config))} \(2 threads\): ([\d.]+) audio s/s consumed "
        rf"\(([\d.]+) s of audio in ([\d.]+) s\)", out).groups())
    assert audio / 1.1 - FRAME_LENGTH_S * len(files) - 0.05 <= trained <= audio / 0.9 + 0.05
    assert 0 < secs < wall and rate == pytest.approx(trained / secs, abs=0.1, rel=0.03)
