"""Helpers of the reliability tests: a two-rank job config, torchrun commands, log parsing,
and running a CLI's ``main`` in this process for its error lines."""
from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import torch

from asrkit.bin import average_model, export, recognize, train
from asrkit import checkpoint as ckpt
from tests.helpers import fork_ranks, free_port, train_args
from tests.train.dist.test_ddp import assert_same_weights

# A "step" line of the training log: "epoch 0 step 3 batch 3/6 | loss ..."
STEP_LINE = re.compile(r"epoch (\d+) step (\d+) batch (\d+)/(\d+) \|")


def two_rank_config(exp, path: Path, **top) -> Path:
    """The tiny config with dropout on (so every rank's RNG stream matters), a per-rank
    batch of 4 (6 optimizer steps per epoch on the 48 training utterances), one loader
    worker per rank and a checkpoint every 2 steps; a hung collective fails within 60 s,
    so a broken test leaves no process behind.  Adam's ``eps`` is 1e-3: with the default 1e-9
    a parameter whose gradient is rounding noise (attention key biases) moves by ``lr`` in a
    noise-chosen direction, so DDP and FSDP, which sum in different orders, would part by
    4e-4 in 6 steps instead of 1e-7."""
    top = {"max_epoch": 2, "save_interval": 2, "launch": {"timeout_s": 60}, "encoder_conf": {"dropout_rate": 0.1},
           "decoder_conf": {"dropout_rate": 0.1}, "optim_conf": {"eps": 1e-3},
           "dataset_conf": {"batch_conf": {"batch_size": 4}, "num_workers": 1}, **top}
    return exp.config(path, **top)


def torchrun(exp, model_dir: Path, config: Path, *extra, nproc: int = 2, max_restarts: int = 0,
             hooks: tuple = ()) -> list[str]:
    """``torchrun --nproc_per_node N --max_restarts R -m asrkit.bin.train ...`` on a free port;
    with ``hooks`` (options of ``tests.hooked_train``) the ranks run through that wrapper."""
    entry = ["-m", "tests.hooked_train", *map(str, hooks), "--"] if hooks else ["-m", "asrkit.bin.train"]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--max_restarts", str(max_restarts), "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
            *entry, *train_args(exp, model_dir, config), *map(str, extra)]


def forked_job(exp, model_dir: Path, config: Path, *extra, nproc: int = 2) -> None:
    """``nproc`` ranks of ``asrkit.bin.train`` from a fork server (``tests.helpers.fork_ranks``:
    no torchrun agent, and no rank importing torch again), which must all succeed."""
    fork_ranks([[*train_args(exp, model_dir, config), *map(str, extra)]] * nproc, check=True)


def steps_logged(log_text: str) -> list[int]:
    """Optimizer steps in the order the log lines report them (log_interval 1)."""
    return [int(m.group(2)) for m in STEP_LINE.finditer(log_text)]


def model_weights(path: Path) -> dict:
    return ckpt.load_checkpoint(path)["model"]


def assert_equal_weights(a: dict, b: dict) -> None:
    """Bit-identical state dicts (same keys, torch.equal for every tensor)."""
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}: " \
                          f"max |diff| {max(float((a[k] - b[k]).abs().max()) for k in different):.3g}"


def assert_engine_weights(engine: str, got: dict, ddp_reference: dict) -> None:
    """A fault test's final weights against the uninterrupted DDP run's: bit-identical under
    torch_ddp; under torch_fsdp (reduce-scatter instead of all-reduce: another summation
    order) within 2e-5 + 1e-4 relative, ``tests/train/dist/test_ddp.py``'s tolerance (measured:
    1.2e-5 at most after 6 steps) -- one step more or less moves them by ~1e-3 (``lr``)."""
    if engine == "torch_ddp":
        assert_equal_weights(got, ddp_reference)
        return
    assert got.keys() == ddp_reference.keys()
    assert_same_weights(got, ddp_reference)


def run_main(tool: str, args: dict, tmp_path, config=None, checkpoint=None) -> list[str]:
    """``main`` of ``tool`` (train, recognize, export or average_model) on the files of
    ``args`` (test_malformed_inputs.py's ``inputs``) in this process; returns its exit status."""
    c, k = str(config or args["config"]), str(checkpoint)
    argv = {"train": ["--config", c, "--train_data", str(args["train"]), "--cv_data", str(args["data"]),
                      "--model_dir", str(tmp_path / "exp")] + (["--checkpoint", k] if checkpoint else []),
            "recognize": ["--config", c, "--checkpoint", k, "--data", str(args["data"]), "--modes",
                          "ctc_greedy_search", "--result_dir", str(tmp_path / "decode")],
            "export": ["--config", c, "--checkpoint", k, "--output", str(tmp_path / "final.zip"), "--no_verify"],
            "average_model": ["--model_dir", str(tmp_path / "ckpts"), "--num", "2", "--mode", "last",
                              "--dst", str(tmp_path / "avg.pt")]}[tool]
    main = {"train": train.main, "recognize": recognize.main, "export": export.main,
            "average_model": average_model.main}[tool]
    return main(argv)


def error_lines(capsys, caplog) -> list[str]:
    """The error lines a tool printed: on stderr (train logs there itself), else the ERROR
    records it logged (recognize/export log through the root logger pytest captures)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]  # (also none printed by a logging handler)
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    lines = lines or [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    caplog.clear()
    return lines
