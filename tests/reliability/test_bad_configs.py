"""Item 5 -- bad configs and command lines: each is refused with a clear message and exit
status 2 before any process group, data loader worker or experiment directory exists.

Runs ``asrkit.bin.train.main`` in this process: what it refuses, it refuses before
``init_distributed``, so nothing here can start a worker."""
from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from asrkit.bin.train import main

CASES = {
    # name: (config keys, extra command-line arguments, expected message)
    "unknown key": ({"accum_grd": 4}, [], "accum_grd: unknown key; did you mean accum_grad?"),
    "unknown nested key": ({"optim_conf": {"lr": 0.001, "betas2": [0.9, 0.98]}}, [], "optim_conf.betas2: unknown key"),
    "wrong type": ({"max_epoch": "ten"}, [], "max_epoch: expected int, got 'ten' (str)"),
    "wrong type in override": ({}, ["--override", "optim_conf.lr=fast"], "optim_conf.lr: expected float, got 'fast'"),
    "accum_grad 0": ({}, ["--override", "accum_grad=0"], "accum_grad: must be > 0, got 0"),
    "missing train list": ({}, ["--train_data", "/nonexistent/train.list"],
                           "--train_data /nonexistent/train.list: file not found"),
    "missing units": ({"tokenizer_conf": {"symbol_table_path": "/nonexistent/units.txt"}}, [],
                      "tokenizer_conf.symbol_table_path /nonexistent/units.txt: file not found"),
    "missing cmvn": ({"cmvn_conf": {"cmvn_file": "/nonexistent/global_cmvn"}}, [],
                     "cmvn_conf.cmvn_file /nonexistent/global_cmvn: file not found"),
    "missing checkpoint": ({}, ["--checkpoint", "/nonexistent/step_9.pt"], "--checkpoint /nonexistent/step_9.pt: file not found"),
    "unknown backend in config": ({"launch": {"dist_backend": "mpi"}}, [],
                                  "launch.dist_backend: must be one of ['auto', 'gloo', 'nccl'], got 'mpi'"),
    "env:// without master": ({}, ["--rank", "0", "--world_size", "2", "--init_method", "env://"],
                              "init_method env:// needs MASTER_ADDR and MASTER_PORT"),
    "unknown init method": ({}, ["--rank", "0", "--world_size", "2", "--init_method", "udp://x:1"],
                            "unknown init_method 'udp://x:1'"),
    "rank outside world": ({}, ["--rank", "2", "--world_size", "2"], "--rank 2 is outside --world_size 2"),
    "keep_global_batch alone": ({"keep_global_batch": True}, [], "keep_global_batch: true needs reference_world_size"),
}
CPU_ONLY: set[str] = set()


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)


def run_main(exp, tmp_path, capsys, top, extra):
    split = exp.corpus.splits
    config = exp.config(tmp_path / "c.yaml", **top)
    argv = ["--config", str(config), "--train_data", str(split["train"].data_list), "--cv_data",
            str(split["dev"].data_list), "--model_dir", str(tmp_path / "exp"), *extra]
    for flag in ("--train_data", "--checkpoint"):  # a later flag wins in argparse
        if argv.count(flag) > 1:
            i = argv.index(flag)
            del argv[i:i + 2]
    start = time.monotonic()
    code = main(argv)
    return code, capsys.readouterr().err, time.monotonic() - start


@pytest.fixture
def heavy_work(monkeypatch):
    """Records every process group and data loader created while the test runs (the calls
    go through as usual): a refusal must come before either."""
    import asrkit.data.dataset as dataset
    made = []
    real_group, real_loader = dist.init_process_group, dataset.build_dataloader

    def group(*args, **kwargs):
        made.append("process group")
        return real_group(*args, **kwargs)

    def loader(*args, **kwargs):
        made.append("data loader")
        return real_loader(*args, **kwargs)

    monkeypatch.setattr(dist, "init_process_group", group)
    monkeypatch.setattr(dataset, "build_dataloader", loader)
    return made


def assert_refused_before_work(code, err, elapsed, expected, tmp_path, heavy_work):
    assert code == 2, err
    assert err.startswith("error: ") and expected in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "exp").exists()          # no experiment directory, no log, no checkpoint
    assert heavy_work == []                         # no process group was formed, no loader built
    assert elapsed < 5, f"refusing took {elapsed:.1f} s"


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_with_a_clear_message_before_any_work(tiny_experiment, tmp_path, capsys, clean_env, heavy_work,
                                                      name):
    if name in CPU_ONLY and torch.cuda.is_available():
        pytest.skip("a refusal on machines without CUDA")
    top, extra, expected = CASES[name]
    code, err, elapsed = run_main(tiny_experiment, tmp_path, capsys, top, extra)
    assert_refused_before_work(code, err, elapsed, expected, tmp_path, heavy_work)


def test_every_problem_of_a_config_is_reported_at_once(tiny_experiment, tmp_path, capsys, clean_env, heavy_work):
    code, err, elapsed = run_main(tiny_experiment, tmp_path, capsys, {"accum_grd": 4, "max_epoch": "ten"},
                                  ["--override", "grad_clip=[1]"])
    assert_refused_before_work(code, err, elapsed, "(3 problem(s))", tmp_path, heavy_work)
    assert "accum_grd" in err and "max_epoch" in err and "grad_clip" in err


def test_missing_config_file(tiny_experiment, tmp_path, capsys, clean_env, heavy_work):
    split = tiny_experiment.corpus.splits
    code = main(["--config", str(tmp_path / "nope.yaml"), "--train_data", str(split["train"].data_list),
                 "--cv_data", str(split["dev"].data_list), "--model_dir", str(tmp_path / "exp")])
    err = capsys.readouterr().err
    assert_refused_before_work(code, err, 0, f"config file not found: {tmp_path / 'nope.yaml'}", tmp_path,
                               heavy_work)


def test_unknown_backend_flag_is_an_argparse_error(tiny_experiment, tmp_path, capsys, clean_env):
    with pytest.raises(SystemExit) as exit_info:
        run_main(tiny_experiment, tmp_path, capsys, {}, ["--dist_backend", "mpi"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "argument --dist_backend: invalid choice: 'mpi'" in err
    assert not (tmp_path / "exp").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="nccl is usable with a GPU")
@pytest.mark.parametrize("where", ["flag", "config"])
def test_nccl_without_a_gpu(tiny_experiment, tmp_path, capsys, clean_env, heavy_work, where):
    top, extra = ({}, ["--dist_backend", "nccl"]) if where == "flag" else ({"launch": {"dist_backend": "nccl"}}, [])
    code, err, elapsed = run_main(tiny_experiment, tmp_path, capsys, top, extra)
    assert_refused_before_work(code, err, elapsed, "dist_backend nccl needs CUDA GPUs, and none is visible here",
                               tmp_path, heavy_work)


def test_stale_file_init_method(tiny_experiment, tmp_path, capsys, clean_env, heavy_work):
    stale = tmp_path / "init_file"
    stale.write_text("")
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    code, err, elapsed = run_main(tiny_experiment, tmp_path, capsys, {},
                                  ["--rank", "0", "--world_size", "2", "--init_method", f"file://{stale}"])
    assert_refused_before_work(code, err, elapsed, f"init file {stale} already exists", tmp_path, heavy_work)
    assert "left over from an earlier run" in err and stale.exists()
