"""Mixed precision on a CPU (``asrkit/train/precision.py``): the decision from the CPU's
flags (injected), fp16 with the CPU GradScaler through forced overflow steps and a resume,
bf16 under autocast with CTC in fp32 and a loss close to fp32's.  Nothing here needs a GPU
or a particular CPU: bf16 and fp16 autocast run (emulated where not native) on any x86."""
from __future__ import annotations

import pytest
import torch

from asrkit import checkpoint as ckpt
from asrkit.train.executor import Executor
from asrkit.train.precision import CpuCapabilities, cpu_capabilities, cpu_precision
from tests.helpers import cpuinfo_flags, train_here

pytestmark = pytest.mark.usefixtures("restore_threads")

EPYC = CpuCapabilities(frozenset({"avx2", "avx512f", "avx512_bf16"}), "AVX512")
SAPPHIRE = CpuCapabilities(frozenset({"avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"}), "AVX512")
HASWELL = CpuCapabilities(frozenset({"avx2", "fma"}), "AVX2")


def test_the_decision_follows_the_cpu_flags(tmp_path):
    assert cpu_precision("fp32", HASWELL) is None
    bf16 = cpu_precision("bf16", EPYC)
    assert not bf16.warning and "native bf16 (avx512_bf16; torch AVX512 kernels)" in bf16.line
    assert "avx512_bf16, amx_bf16" in cpu_precision("bf16", SAPPHIRE).line
    slow = cpu_precision("bf16", HASWELL)
    assert slow.warning and "without native bf16" in slow.line and "~27x slower than fp32" in slow.line
    assert "docs/experiments/cpu_precision_avx2.md" in slow.line
    fp16 = cpu_precision("fp16", EPYC)
    assert fp16.warning and "without native fp16" in fp16.line and "GradScaler" in fp16.line
    assert not cpu_precision("fp16", SAPPHIRE).warning
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_capabilities(tmp_path / "cpuinfo").flags == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_capabilities(tmp_path / "missing").flags == frozenset()


class Recorder:
    """Wraps ``Executor._forward``: records the first key of every training batch
    (``first_keys``), the autocast state and the CTC loss's dtype of every training forward
    (``seen``), and multiplies the loss of the batches whose first key is in
    ``overflow`` by 1e4 -- finite in fp32, but its gradients overflow fp16 (> 65504) in the
    backward pass of the autocast matmuls: a real fp16 overflow, a pure function of the batch,
    so a resumed run meets it where an uninterrupted one does."""

    def __init__(self, monkeypatch, overflow=frozenset(), overflow_all=False):
        self.first_keys, self.seen, self.overflow, self.overflowed = [], [], set(overflow), []
        original = Executor._forward

        def forward(executor, model, batch, chunk, **options):
            inside = []
            hook = getattr(model, "module", model).encoder.register_forward_hook(  # (inside the forward)
                lambda module, args, output: inside.append((torch.is_autocast_enabled("cpu"),
                                                            torch.get_autocast_dtype("cpu"))))
            try:
                out = original(executor, model, batch, chunk, **options)
            finally:
                hook.remove()
            if model.training:
                self.first_keys.append(batch["keys"][0])
                self.seen.append((*inside[0], out["loss_ctc"].dtype))
                if overflow_all or batch["keys"][0] in self.overflow:
                    self.overflowed.append(batch["keys"][0])
                    out = {**out, "loss": out["loss"] * 1e4}
            return out
        monkeypatch.setattr(Executor, "_forward", forward)


def first_keys(exp, tmp_path, cfg, monkeypatch, count: int) -> list[str]:
    """The first key of each of the first ``count`` training batches of epoch 0."""
    with monkeypatch.context() as m:
        rec = Recorder(m)
        train_here(exp, tmp_path / "probe", cfg, "--max_steps", count)
    return rec.first_keys[:count]


def test_fp16_overflow_steps_are_calibration_skips_and_a_resume_continues_exactly(tiny_experiment, tmp_path,
                                                                                 monkeypatch):
    """fp16 on the CPU with its GradScaler: two batches forced to overflow are two calibration
    skips (not faults), each halving the scale, and the scale grows back (growth interval 4
    here); a run stopped after step 3 and resumed ends with the weights and scaler state of an
    uninterrupted run, bit for bit."""
    import asrkit.train.build as build
    monkeypatch.setattr(build, "amp_scaler", lambda cfg, device: torch.amp.GradScaler(
        device.type, init_scale=2.0 ** 12, growth_interval=4) if cfg.dtype == "fp16" else None)
    cfg = tiny_experiment.config(tmp_path / "c.yaml", dtype="fp16", max_epoch=2, save_interval=3)
    overflow = first_keys(tiny_experiment, tmp_path, cfg, monkeypatch, 3)[1:3]  # the 2nd and 3rd batches
    full, parted = tmp_path / "full", tmp_path / "parted"
    rec = Recorder(monkeypatch, overflow)
    err = train_here(tiny_experiment, full, cfg).stderr
    assert "fp16 on a CPU without native fp16" in err or "fp16 autocast on a CPU with native fp16" in err
    assert set(rec.seen) == {(True, torch.float16, torch.float32)}  # autocast on, CTC in fp32
    a = ckpt.load_checkpoint(full / "epoch_1.pt")
    assert rec.overflowed[:2] == overflow and a["train_state"]["nonfinite_total"] == 0
    # every forced overflow is a calibration skip (the scaler may also meet a natural one)
    skips = a["train_state"]["scaler_skips"]
    assert skips >= len(rec.overflowed) >= 2
    assert a["scaler"]["scale"] > 2.0 ** 12 / 2 ** skips  # each skip halved it; it grew back since
    train_here(tiny_experiment, parted, cfg, "--max_steps", 3)
    assert ckpt.load_checkpoint(parted / "step_3.pt")["train_state"]["scaler_skips"] >= 2
    assert "resumed from" in train_here(tiny_experiment, parted, cfg, "--checkpoint", "auto").stderr
    b = ckpt.load_checkpoint(parted / "epoch_1.pt")
    counters = ("epoch", "step", "nonfinite_total", "scaler_skips", "empty_groups")
    assert [a["train_state"][k] for k in counters] == [b["train_state"][k] for k in counters]
    assert a["scaler"] == b["scaler"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_an_epoch_of_only_fp16_calibration_skips_is_not_a_data_error(tiny_experiment, tmp_path, monkeypatch):
    """An epoch whose every step overflows fp16 (a short epoch while the GradScaler finds its
    scale: the tiny GPU tests' first epoch) applies no step, but no sample was bad: training
    goes on (exit 0) and the epoch's checkpoint records the skips -- "no utterance could be
    used" is for epochs whose samples were all skipped as bad data."""
    cfg = tiny_experiment.config(tmp_path / "c.yaml", dtype="fp16", max_epoch=1)
    rec = Recorder(monkeypatch, overflow_all=True)
    err = train_here(tiny_experiment, tmp_path / "exp", cfg).stderr
    assert "0 utterances trained, 0 skipped as bad data" in err and "no utterance could be used" not in err
    state = ckpt.load_checkpoint(tmp_path / "exp" / "epoch_0.pt")["train_state"]
    assert state["step"] == 0 and state["nonfinite_total"] == 0
    assert state["scaler_skips"] == len(rec.overflowed) > 0


def test_bf16_trains_under_autocast_with_ctc_in_fp32_close_to_fp32(tiny_experiment, tmp_path, monkeypatch):
    """bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2 % per operation, errors that
    average out over the sums of a matmul); after 12 optimizer steps from the same seed the CV
    loss stays within 3 % of fp32's (measured here: under 1 %)."""
    losses = {}
    for dtype in ("fp32", "bf16"):
        rec = Recorder(monkeypatch)
        out = tmp_path / dtype
        err = train_here(tiny_experiment, out, tiny_experiment.config(tmp_path / f"{dtype}.yaml", dtype=dtype,
                                                                       max_epoch=2)).stderr
        autocast = {"fp32": False, "bf16": True}[dtype]
        assert {(on, ctc) for on, _, ctc in rec.seen} == {(autocast, torch.float32)}
        if autocast:
            assert {d for _, d, _ in rec.seen} == {torch.bfloat16} and "mixed precision: " in err
            # what the run says, against this CPU's flags read here independently of
            # asrkit.train.precision: native bf16 logged as such, else the emulation warning
            native = {"avx512_bf16", "amx_bf16"} & cpuinfo_flags()
            assert ("bf16 autocast on a CPU with native bf16" in err) == bool(native)
            assert ("bf16 on a CPU without native bf16" in err) == (not native)
        state = ckpt.load_checkpoint(out / "epoch_1.pt")
        assert state["train_state"]["nonfinite_total"] == 0 and state["scaler"] == {}
        losses[dtype] = ckpt.read_info(out / "epoch_1.pt")["cv_loss"]
    print(f"CV loss after 12 steps: {losses}")
    assert abs(losses["bf16"] - losses["fp32"]) <= 0.03 * losses["fp32"], losses


def test_dtype_auto_picks_bf16_only_where_the_device_has_it():
    from asrkit.train.precision import resolve_auto_dtype
    cpu = torch.device("cpu")
    assert resolve_auto_dtype(cpu, EPYC) == ("bf16", "dtype auto -> bf16: the CPU has native bf16 (avx512_bf16)")
    dtype, why = resolve_auto_dtype(cpu, HASWELL)
    assert dtype == "fp32" and "no native bf16" in why and "~27x slower than fp32" in why
    assert resolve_auto_dtype(torch.device("cuda"), cuda_bf16=True)[0] == "bf16"
    assert resolve_auto_dtype(torch.device("cuda"), cuda_bf16=False)[0] == "fp32"


def test_the_trainer_resolves_dtype_auto_logs_it_and_saves_the_result(tiny_experiment, tmp_path):
    import yaml
    from asrkit.train.precision import resolve_auto_dtype
    out = tmp_path / "auto"
    err = train_here(tiny_experiment, out, tiny_experiment.config(tmp_path / "auto.yaml", dtype="auto"),
                     "--max_steps", 1).stderr
    dtype, why = resolve_auto_dtype(torch.device("cpu"))
    assert f"config: {why}" in err
    assert yaml.safe_load((out / "train.yaml").read_text())["dtype"] == dtype
