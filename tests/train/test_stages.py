"""The run's shape (``asrkit.train.entry``/``asrkit.train.stages``): the config final once
validated, the exits and their statuses, and what crosses between the trainer and the
executor -- a step result per optimizer step, the stop requests summed in it."""
from __future__ import annotations

import signal
import time

import pytest
import torch

from asrkit.config import load_config
from asrkit.train import entry
from asrkit.train.build import build_training
from asrkit.train.counters import TrainState
from asrkit.train.dist import DistContext
from asrkit.train.preemption import EXIT_PREEMPTED, Preempted
from asrkit.train.problems import Failed, Refused, TrainingExit, exits_as
from asrkit.train.trainer import Trainer
from tests.helpers import random_batch

pytestmark = pytest.mark.usefixtures("restore_threads")


def test_every_exit_carries_its_status():
    assert (TrainingExit.exit_status, Failed.exit_status, Refused.exit_status, Preempted.exit_status) == \
        (1, 1, 2, EXIT_PREEMPTED)
    with pytest.raises(Refused, match="^cannot resume: broken$") as caught:
        with exits_as(Refused, KeyError, ValueError, prefix="cannot resume: ", once_per_node=True):
            raise ValueError("broken")
    assert caught.value.once_per_node and isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(OSError):  # (not a type it was given: left as it is)
        with exits_as(Failed, ValueError):
            raise OSError("disk")


def test_dtype_auto_is_resolved_into_a_validated_config(tiny_experiment, tmp_path, monkeypatch):
    path = tiny_experiment.config(tmp_path / "auto.yaml", dtype="auto")
    monkeypatch.setattr(entry, "resolve_auto_dtype", lambda device: ("bf16", "dtype auto -> bf16: test"))
    notes: list[str] = []
    cfg = entry.load_final_config(path, ["seed=5"], "cpu", notes)
    assert cfg.dtype == "bf16" and cfg.seed == 5 and notes == ["dtype auto -> bf16: test"]
    assert cfg == load_config(path, ["seed=5", "dtype=bf16"])  # the same validation as a written bf16
    written = tiny_experiment.config(tmp_path / "fp32.yaml", dtype="fp32")
    assert entry.load_final_config(written, [], "cpu", notes).dtype == "fp32" and len(notes) == 1


def _trainer(exp, tmp_path, **top) -> Trainer:
    cfg = load_config(exp.config(tmp_path / "c.yaml", **top))
    split = exp.corpus.splits
    parts = build_training(cfg, DistContext(), train_data=str(split["train"].data_list),
                           cv_data=str(split["dev"].data_list))
    return Trainer(parts, DistContext(), tmp_path / "exp", max_steps=3)


def test_a_stop_request_ends_fit_after_a_checkpoint_with_preempted(tiny_experiment, tmp_path):
    """The stop request this rank adds to the step's all-reduce comes back in the step result;
    the trainer saves ``step_1.pt`` and raises :class:`Preempted` after that first step."""
    trainer = _trainer(tiny_experiment, tmp_path)
    handler = signal.getsignal(signal.SIGTERM)
    trainer.preemption.signum, trainer.preemption.received_at = signal.SIGTERM, time.monotonic()
    with pytest.raises(Preempted, match=r"^exiting with status 4 after SIGTERM \(step 1 saved\)$"):
        trainer.fit()
    assert trainer.state.step == 1 and sorted(p.name for p in (tmp_path / "exp").glob("*.pt")) == ["step_1.pt"]
    assert signal.getsignal(signal.SIGTERM) is handler  # (fit's handler uninstalled)


def test_without_a_stop_request_fit_runs_to_max_steps(tiny_experiment, tmp_path):
    trainer = _trainer(tiny_experiment, tmp_path)
    assert trainer.fit().step == 3 and (tmp_path / "exp" / "step_3.pt").is_file()
    assert any((tmp_path / "exp" / "tensorboard").iterdir())  # (the trainer's writer, closed)


def test_the_executor_reports_each_step_in_its_result(tmp_path):
    from tests.train.test_executor import make
    gen = torch.Generator().manual_seed(3)
    batches = [random_batch(gen, n, vocab=10) for n in (2, 3, 1)]
    _, _, ex = make(tmp_path, accum_grad=2, log_interval=2)
    asks = iter([False, True])
    results = list(ex.steps(batches, state := TrainState(), stop_requested=lambda: next(asks)))
    assert state.step == 2 and [r.utterances for r in results] == [5, 1]
    assert [r.stop_requests for r in results] == [0, 1]  # (one process: the sum is its own request)
    assert results[0].scalars is None and results[1].scalars["grad_norm"] > 0  # (a log line at step 2)
