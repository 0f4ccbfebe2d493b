"""Item 1 -- a killed rank: one of two training processes is SIGKILLed mid-epoch under
``torchrun --max_restarts 1``; the job restarts, resumes from the newest valid checkpoint
by itself (``--checkpoint auto``) and completes with the weights of an uninterrupted run.

Fault injection: the ranks run through ``tests.hooked_train --kill_rank 1 --kill_step 3``, which
makes rank 1 SIGKILL itself right after optimizer step 3, before anything of step 3 is saved,
in the first attempt only; ``save_interval: 2`` has written ``step_2.pt`` by then.
"""
from __future__ import annotations

import re

import pytest

from tests.helpers import plain_env, run_checked
from tests.reliability.common import assert_engine_weights, model_weights, steps_logged, torchrun

pytestmark = pytest.mark.slow


def test_sigkilled_rank_restarts_and_resumes_from_newest_checkpoint(tiny_experiment, engine_run,
                                                                      reliability_root):
    """... under either training engine (torch_fsdp: every rank resumes from its shards of step_2)."""
    engine, config, reference = engine_run
    model_dir = reliability_root / f"killed_{engine}"
    proc = run_checked(torchrun(tiny_experiment, model_dir, config, "--checkpoint", "auto",
                                "--override", "max_epoch=1", max_restarts=1,
                                hooks=("--kill_rank", 1, "--kill_step", 3)), env=plain_env(), timeout=150)
    log0 = (model_dir / "log" / "rank0.log").read_text()
    log1 = (model_dir / "log" / "rank1.log").read_text()
    # the first attempt really lost rank 1 after step 3 (never saved), and the agent restarted the job
    assert "rank 1 kills itself with SIGKILL now" in log1
    assert log0.count("launch via torchrun") == 2 and log1.count("launch via torchrun") == 2
    # rank 0's first attempt went no further than step 3: it noticed the lost peer in the
    # next collective, or torchrun's agent stopped it first (the two race; either is right)
    first_attempt = log0[:log0.rindex("launch via torchrun")]
    assert steps_logged(first_attempt) == [1, 2, 3], first_attempt[-3000:]
    failed = re.search(r"rank 0 \(host .*\): a collective failed after ([0-9.]+) s.*", first_attempt)
    if failed:  # rank 1's loader worker died with it (PR_SET_PDEATHSIG) instead of holding its
        # sockets open: gloo saw the peer's connection close, not a timeout (no clock involved)
        assert re.search(r"Connection (closed|reset) by peer", failed.group(0)), failed.group(0)
        assert "Timed out" not in failed.group(0)
    # the restarted ranks found step_2.pt by themselves and redid step 3 onwards
    for log in (log0, log1):
        assert f"resumed from {model_dir / 'step_2.pt'}: epoch 0, step 2 (mid-epoch)" in log
    second_attempt = log0[log0.rindex("launch via torchrun"):]
    assert steps_logged(second_attempt) == [3, 4, 5, 6]
    assert "training finished at epoch 1, step 6" in log0
    assert ("parameters sharded over 2 ranks" in second_attempt) == (engine == "torch_fsdp")
    assert_engine_weights(engine, model_weights(model_dir / "epoch_0.pt"), model_weights(reference / "epoch_0.pt"))
