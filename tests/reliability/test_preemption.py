"""Item 2 -- preemption: SIGTERM (what SLURM and torchrun send, with ~30 s of grace) makes
every rank save at the same optimizer-step boundary and exit cleanly within the grace; a
rerun with ``--checkpoint auto`` continues with no step lost or repeated and ends with the
weights of an uninterrupted run.

The signal arrives at a known point: rank 0 pauses right after optimizer step 2
(``tests.hooked_train --pause_rank 0 --pause_step 2``), before the step-boundary all-reduce
in which the ranks agree to stop, and is released once SIGTERM has been sent; rank 1 waits in
that all-reduce meanwhile.  So the stop falls at step 2 (or, were a signal delivered late,
a step or two after), however loaded the machine."""
from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from asrkit.train.preemption import EXIT_PREEMPTED
from tests.helpers import REPO, plain_env, run_checked
from tests.reliability.common import assert_engine_weights, model_weights, steps_logged, torchrun

pytestmark = pytest.mark.slow
GRACE_S = 30  # torchrun's --shutdown_timeout and SLURM's default KillWait
ONE_EPOCH = ("--override", "max_epoch=1")  # (6 optimizer steps; the reference's epoch_0 is compared)


def wait_for_file(path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the job ended (status {proc.returncode}) before {path.name} appeared:\n"
                                 f"{proc.stderr.read()[-4000:]}")
        time.sleep(0.02)
    raise AssertionError(f"no {path} within {timeout} s")


def test_sigterm_saves_at_a_step_boundary_and_rerun_continues_exactly(tiny_experiment, engine_run,
                                                                      reliability_root):
    """... under either training engine (torch_fsdp: the ranks write their shards at the stop)."""
    engine, config, reference = engine_run
    model_dir = reliability_root / f"preempted_{engine}"
    pause = reliability_root / f"preempted_{engine}.release"
    proc = subprocess.Popen(torchrun(tiny_experiment, model_dir, config, "--checkpoint", "auto", *ONE_EPOCH,
                                     hooks=("--pause_rank", 0, "--pause_step", 2, "--pause_file", pause)),
                            cwd=REPO, env=plain_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_file(pause.with_name(pause.name + ".reached"), proc)
        proc.send_signal(signal.SIGTERM)  # to the torchrun agent, which forwards it to both workers
        signalled = time.monotonic()
        time.sleep(1.0)  # (the agent forwards at once: a second leaves room for a loaded machine)
        pause.touch()
        _, err = proc.communicate(timeout=GRACE_S + 30)
        elapsed = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    logs = [(model_dir / "log" / f"rank{r}.log").read_text() for r in (0, 1)]
    # both ranks stopped at the same optimizer step, after a checkpoint of that step
    stopped = [int(step) for text in logs for step in re.findall(r"with a checkpoint at step (\d+)", text)]
    assert len(stopped) == 2 and stopped[0] == stopped[1], (stopped, err[-3000:])
    step = stopped[0]
    assert 2 <= step < 6, step
    assert all(f"exiting with status {EXIT_PREEMPTED}" in t for t in logs), err[-3000:]
    assert "received SIGTERM" in logs[0] and "received SIGTERM" in logs[1]
    assert elapsed < GRACE_S / 2, f"the job took {elapsed:.1f} s to stop"  # well within the grace, never killed
    assert (model_dir / f"step_{step}.pt").is_file() and not (model_dir / "epoch_0.pt").exists()
    assert (model_dir / f"step_{step}.dcp").is_dir() == (engine == "torch_fsdp")
    assert steps_logged(logs[0]) == list(range(1, step + 1))

    rerun = run_checked(torchrun(tiny_experiment, model_dir, config, "--checkpoint", "auto", *ONE_EPOCH),
                        env=plain_env(), timeout=240)
    log0 = (model_dir / "log" / "rank0.log").read_text()
    assert f"resumed from {model_dir / f'step_{step}.pt'}" in log0, rerun.stderr[-3000:]
    # across the two runs every optimizer step was taken exactly once, in order
    assert steps_logged(log0) == list(range(1, 7))
    assert_engine_weights(engine, model_weights(model_dir / "epoch_0.pt"), model_weights(reference / "epoch_0.pt"))
