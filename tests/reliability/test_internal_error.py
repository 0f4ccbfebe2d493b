"""An internal error -- an exception that is none of asrkit's ``TrainingExit``s, i.e. a bug --
ends the training process at once with status 1 and its traceback, with a data-loader worker
running.  (It used to end through the interpreter's finalization, whose multiprocessing hook
sends the workers SIGTERM, which they ignore, and then waits for them without a limit: the
process hung, its torchrun job with it.)"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, plain_env, train_args

pytestmark = pytest.mark.slow


def test_an_internal_error_ends_the_process_with_status_1_and_its_traceback(tiny_experiment, tmp_path):
    config = tiny_experiment.config(tmp_path / "c.yaml", dataset_conf={"num_workers": 1})
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tests.hooked_train", "--raise_step", "1", "--",
                           *train_args(tiny_experiment, tmp_path / "exp", config)],
                          capture_output=True, text=True, cwd=REPO, env=plain_env(), timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "error: internal error (a bug in asrkit) -- traceback:" in proc.stderr
    assert proc.stderr.rstrip().endswith("RuntimeError: fault injection: an internal error after step 1")
    assert time.monotonic() - start < 60


def test_an_encoder_the_builder_refuses_is_one_line_and_status_2_not_an_internal_error(tiny_experiment, tmp_path,
                                                                                       capsys):
    """Values the schema lets through but the encoder's builder refuses (WeNet asserts on them):
    an Efficient Conformer whose kernel 5, halved by the stride of block 1, is even."""
    import yaml

    from asrkit.bin.train import main
    path = tiny_experiment.config(tmp_path / "c.yaml")
    cfg = yaml.safe_load(path.read_text())
    cfg.update(encoder="efficientConformer", encoder_conf={
        "output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 3, "cnn_module_kernel": 5,
        "efficient_conf": {"stride_layer_idx": [1], "stride": [2], "group_layer_idx": [1], "group_size": 2}})
    path.write_text(yaml.safe_dump(cfg))
    code = main(train_args(tiny_experiment, tmp_path / "exp", path))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "internal error" not in err, err[-3000:]
    assert "encoder_conf: the blocks' convolution kernels [5, 5, 2]" in err
