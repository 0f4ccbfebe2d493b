"""asrkit.bin.train end to end on the tiny corpus: validation first, exact resume, averaging."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from asrkit import checkpoint as ckpt
from tests.helpers import REPO, train_args
from tests.helpers import train_here as train


def weights(path):
    return ckpt.load_checkpoint(path)["model"]


def train_in_process(exp, model_dir, config, *extra) -> tuple[int, str]:
    """``asrkit.bin.train.main`` in this process, whatever its exit status: (status, stderr)."""
    proc = train(exp, model_dir, config, *extra, check=False)
    return proc.returncode, proc.stderr


def test_bad_config_and_files_fail_before_work(tiny_experiment, tmp_path):
    def run(config, *extra):
        return train_in_process(tiny_experiment, tmp_path / "exp", config, *extra)

    code, err = run(tiny_experiment.config(tmp_path / "c.yaml", accum_grd=4))
    assert code == 2 and "did you mean accum_grad?" in err
    bad_units = tiny_experiment.config(tmp_path / "c2.yaml", tokenizer_conf={"symbol_table_path": "/nope/u.txt"})
    code, err = run(bad_units, "--override", "accum_grad=0")
    assert code == 2 and "accum_grad: must be > 0" in err
    code, err = run(bad_units)
    assert code == 2 and "/nope/u.txt: file not found" in err
    assert not (tmp_path / "exp").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="refusals of GPU-only settings on a machine without CUDA")
def test_gpu_only_settings_are_refused_on_cpu(tiny_experiment, tmp_path):
    def run(config, *extra):
        return train_in_process(tiny_experiment, tmp_path / "exp", config, *extra)

    code, err = run(tiny_experiment.config(tmp_path / "c4.yaml"), "--dist_backend", "nccl")
    assert code == 2 and "nccl needs CUDA" in err
    assert not (tmp_path / "exp").exists()


@pytest.mark.slow
def test_resume_mid_epoch_matches_uninterrupted_run(tiny_experiment, tmp_path):
    """Stopped after 3 steps (num_workers=2, prefetch, augmentation and dropout on) and
    resumed with --checkpoint auto: the final weights equal an uninterrupted run's."""
    cfg = tiny_experiment.config(
        tmp_path / "c.yaml", max_epoch=2, save_interval=2,
        encoder_conf={"dropout_rate": 0.1}, decoder_conf={"dropout_rate": 0.1},
        dataset_conf={"speed_perturb": True, "spec_aug": True, "num_workers": 2, "prefetch_factor": 2,
                      "fbank_conf": {"dither": 0.1}})
    full, parted = tmp_path / "full", tmp_path / "parted"
    train(tiny_experiment, full, cfg)
    first = train(tiny_experiment, parted, cfg, "--max_steps", 3)
    assert "reached max_steps=3" in first.stderr and (parted / "step_3.pt").is_file()
    assert not (parted / "epoch_0.pt").exists()
    second = train(tiny_experiment, parted, cfg, "--checkpoint", "auto")
    assert "resumed from" in second.stderr and "(mid-epoch)" in second.stderr
    a, b = weights(full / "epoch_1.pt"), weights(parted / "epoch_1.pt")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=k)
    info = ckpt.read_info(parted / "epoch_1.pt")
    assert info["step"] == ckpt.read_info(full / "epoch_1.pt")["step"] and info["cv_loss"] > 0


def test_train_writes_yaml_checkpoints_and_averages(tiny_experiment, tmp_path):
    from asrkit.config import load_config
    cfg = tiny_experiment.config(tmp_path / "c.yaml", max_epoch=2)
    exp = tmp_path / "exp"
    proc = train(tiny_experiment, exp, cfg)
    for needle in ("frames/s", "data_wait", "eta", "grad_norm", "lr ", "CV epoch 1"):
        assert needle in proc.stderr, needle
    resolved = load_config(exp / "train.yaml")
    assert resolved.input_dim == 40 and resolved.output_dim > 10
    assert (exp / "log" / "rank0.log").is_file() and any((exp / "tensorboard").iterdir())
    for path in (exp / "epoch_0.pt", exp / "epoch_1.pt"):
        torch.load(path, weights_only=True)
    avg = tmp_path / "avg.pt"
    from asrkit.bin.average_model import main as average
    assert average(["--model_dir", str(exp), "--dst", str(avg), "--num", "2", "--mode", "best"]) == 0
    a0, a1, mean = weights(exp / "epoch_0.pt"), weights(exp / "epoch_1.pt"), weights(avg)
    key = next(k for k, v in mean.items() if v.is_floating_point())
    torch.testing.assert_close(mean[key], (a0[key] + a1[key]) / 2)


def test_enc_init_starts_from_another_runs_encoder(tiny_experiment, tmp_path):
    """--enc_init copies the encoder (logged with its tensor count); a model whose encoder
    has another shape is refused before training (status 2, naming the key)."""
    cfg = tiny_experiment.config(tmp_path / "c.yaml", max_epoch=1)
    source = tmp_path / "source"
    train(tiny_experiment, source, cfg, "--max_steps", 1)
    # another seed: without the copy, every weight of the new run would start elsewhere
    init = train(tiny_experiment, tmp_path / "fresh", cfg, "--max_steps", 1, "--enc_init", source / "step_1.pt",
                 "--override", "seed=5")
    assert "tensors (encoder.) from" in init.stderr
    before, after = weights(source / "step_1.pt"), weights(tmp_path / "fresh" / "step_1.pt")
    # one Adam step (lr <= 0.002 in warm-up) moves a weight by at most about lr
    moved = {k: float((after[k] - before[k]).abs().max()) for k in before if before[k].is_floating_point()}
    encoder = [v for k, v in moved.items() if k.startswith("encoder.") and "cmvn" not in k]
    decoder = [v for k, v in moved.items() if k.startswith("decoder.")]
    assert encoder and max(encoder) < 0.005, max(encoder)     # started from the source's encoder
    assert decoder and max(decoder) > 0.05, max(decoder)      # the decoder was initialised afresh
    code, err = train_in_process(tiny_experiment, tmp_path / "wide", cfg, "--enc_init", source / "step_1.pt",
                                 "--override", "encoder_conf.output_size=48")
    assert code == 2 and "cannot initialise from --enc_init" in err


def test_warm_start_trains_first_on_its_list_then_starts_from_it(tiny_experiment, tmp_path):
    """--warm_start_data: a fresh run first trains --warm_start_steps on that list in
    <model_dir>/warm_start (its overrides there only), then starts from that model; a resumed
    run does not train the warm start again."""
    cfg = tiny_experiment.config(tmp_path / "c.yaml", max_epoch=1)
    few = tmp_path / "one voice.list"
    few.write_text("\n".join(tiny_experiment.corpus.splits["train"].data_list.read_text().splitlines()[:16]) + "\n")
    exp, warm = tmp_path / "exp", ["--warm_start_data", few, "--warm_start_steps", 1,
                                   "--warm_start_override", "optim_conf.lr=0.0005"]
    code, err = train_in_process(tiny_experiment, exp, cfg, *warm, "--checkpoint", "auto")
    assert code == 0, err[-3000:]
    start = exp / "warm_start" / "step_1.pt"
    warm_log = (exp / "warm_start" / "log" / "rank0.log").read_text()
    assert "train loader rank 0/1: 16 utterances" in warm_log and "reached max_steps=1" in warm_log
    assert "lr: 0.0005" in (exp / "warm_start" / "train.yaml").read_text()
    assert "lr: 0.0005" not in (exp / "train.yaml").read_text()
    log = (exp / "log" / "rank0.log").read_text()
    assert f"tensors (encoder.,decoder.,ctc.) from {start}" in log and "48 utterances trained" in log
    stamp = start.stat().st_mtime_ns
    code, err = train_in_process(tiny_experiment, exp, cfg, *warm, "--checkpoint", "auto")
    assert code == 0 and "warm start: the run resumes from its own checkpoint" in err
    assert start.stat().st_mtime_ns == stamp
    assert (exp / "warm_start" / "log" / "rank0.log").read_text() == warm_log
    code, err = train_in_process(tiny_experiment, tmp_path / "x", cfg, "--warm_start_data", tmp_path / "no.list")
    assert code == 2 and "no.list: file not found" in err and "needs --warm_start_steps N" in err


def test_a_malformed_list_line_is_one_line_and_status_2(tiny_experiment, tmp_path):
    """A data list whose 3rd line is not JSON stops training before any step: exit 2, one
    error line naming the file and line, no traceback, no checkpoint."""
    lines = tiny_experiment.corpus.splits["train"].data_list.read_text().splitlines()
    bad = tmp_path / "train.list"
    bad.write_text("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n")
    cfg = tiny_experiment.config(tmp_path / "c.yaml", max_epoch=1)
    proc = subprocess.run([sys.executable, "-m", "asrkit.bin.train",
                           *train_args(tiny_experiment, tmp_path / "exp", cfg, train_list=bad)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line or line.startswith("error")]
    assert len(errors) == 1 and f"{bad}:3: not valid JSON" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not list((tmp_path / "exp").glob("*.pt"))


def test_trains_on_a_wenet_shard_list_indexed_once_into_the_experiment_folder(tiny_experiment, tmp_path,
                                                                                monkeypatch):
    """A WeNet shard list (plain tar paths) trains.  Its folder cannot take the index cache
    (a directory is in the way), so the index goes to <model_dir>/shard_index; the tars are
    scanned once (before the ranks' agreement check, which is handed the index digest), and
    the loaders read the cache."""
    from asrkit.data.wenet_shards import load_wenet_shard_list
    from asrkit.train import agreement
    from tests.data.audio_helpers import list_rows, write_wenet_shards
    rows = list_rows(tiny_experiment.corpus.splits["train"].data_list)
    lst = write_wenet_shards(rows, tmp_path / "shards", tmp_path / "data" / "data.list", per_tar=24)
    (tmp_path / "data" / "data.list.index.json").mkdir()
    compared = {}
    check = agreement.check_agreement
    monkeypatch.setattr(agreement, "check_agreement",
                        lambda ctx, config, files, extra=None: compared.update(files) or check(ctx, config, files, extra))
    cfg = tiny_experiment.config(tmp_path / "c.yaml", max_epoch=1)
    exp = tmp_path / "exp"
    proc = train(tiny_experiment, exp, cfg, train_list=lst)
    [cache] = (exp / "shard_index").glob("data.list.*.index.json")
    index = load_wenet_shard_list(lst, exp)
    assert index.scanned == 0 and index.cache_path == cache and len(index.entries) == 48
    assert compared["train shard index"] == {"path": str(cache), "sha256": index.digest, "bytes": index.size,
                                             "kind": "shard index"}
    assert proc.stderr.count("WeNet shard list, 2 tars, 48 utterances (") == 2  # agreement, then the loader
    assert proc.stderr.count("2 tar(s) scanned") == 1 and "0 tar(s) scanned, index " + str(cache) in proc.stderr
    assert (exp / "epoch_0.pt").is_file()
