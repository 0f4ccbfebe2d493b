"""WarmupLR follows lr·warmup^0.5·min(step^-0.5, step·warmup^-1.5), one step per optimizer step."""
import pytest
import torch

from asrkit.train.scheduler import WarmupLR


def test_warmup_then_inverse_sqrt():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=0.002)
    sched = WarmupLR(opt, warmup_steps=100)
    seen = []
    for _ in range(400):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expect = lambda s: 0.002 * 100 ** 0.5 * min(s ** -0.5, s * 100 ** -1.5)
    assert seen[0] == pytest.approx(expect(1))          # the first step uses step 1
    assert seen[99] == pytest.approx(0.002)              # peak at warmup_steps
    assert seen[399] == pytest.approx(expect(400))
    assert max(seen) == pytest.approx(0.002)


def test_state_dict_round_trip():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=0.01)
    sched = WarmupLR(opt, warmup_steps=10)
    for _ in range(7):
        opt.step()
        sched.step()
    opt2 = torch.optim.Adam([p], lr=0.01)
    sched2 = WarmupLR(opt2, warmup_steps=10)
    sched2.load_state_dict(sched.state_dict())
    opt2.step()
    sched2.step()
    opt.step()
    sched.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(opt.param_groups[0]["lr"])


def _lrs(sched, opt, steps):
    seen = []
    for _ in range(steps):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seen


def test_noam_hold_annealing_warmup_hold_decay_floor():
    """WeNet's NoamHoldAnnealing: step counted from 0; warmup (s+1)/(W+1), hold at the peak,
    decay W^d/(s-H)^d (continuous where the hold ends), min_lr after max_steps."""
    from asrkit.train.scheduler import NoamHoldAnnealing
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=0.002)
    seen = _lrs(NoamHoldAnnealing(opt, max_steps=1000, warmup_steps=100, hold_steps=300, decay_rate=1.0,
                                  min_lr=1e-5), opt, 1100)
    assert seen[0] == pytest.approx(0.002 * 1 / 101)
    assert seen[50] == pytest.approx(0.002 * 51 / 101)
    assert seen[100] == pytest.approx(0.002)
    assert seen[250] == pytest.approx(0.002) and seen[399] == pytest.approx(0.002)
    assert seen[400] == pytest.approx(0.002)                      # 100 / (400 - 300)
    assert seen[800] == pytest.approx(0.002 * 100 / 500)
    assert seen[1000] == pytest.approx(0.002 * 100 / 700)
    assert seen[1001] == pytest.approx(1e-5) and seen[1099] == pytest.approx(1e-5)
    assert max(seen) == pytest.approx(0.002)


def test_noam_hold_annealing_without_hold_is_noam():
    from asrkit.train.scheduler import NoamHoldAnnealing
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=0.01)
    seen = _lrs(NoamHoldAnnealing(opt, max_steps=500, warmup_steps=25), opt, 400)
    assert seen[25] == pytest.approx(0.01)
    assert seen[100] == pytest.approx(0.01 * (25 / 100) ** 0.5)   # decay_rate 0.5: Noam's
    assert seen[399] == pytest.approx(0.01 * (25 / 399) ** 0.5)


def _config(tmp_path, scheduler_yaml):
    from asrkit.config import load_config
    path = tmp_path / "train.yaml"
    path.write_text("encoder: conformer\ndecoder: transformer\n" + scheduler_yaml)
    return load_config(path)


def test_wenet_squeezeformer_scheduler_config_loads_and_builds(tmp_path):
    """WeNet's squeezeformer recipes' section as written there (min_lr as YAML reads 1e-5: a string)."""
    from asrkit.train.scheduler import NoamHoldAnnealing, build_scheduler
    cfg = _config(tmp_path, "optim: adamw\noptim_conf:\n  lr: 0.001\nscheduler: NoamHoldAnnealing\n"
                            "scheduler_conf:\n  warmup_ratio: 0.2\n  hold_ratio: 0.3\n  max_steps: 1000\n"
                            "  decay_rate: 1.0\n  min_lr: 1e-5\n")
    p = torch.nn.Parameter(torch.zeros(1))
    sched = build_scheduler(cfg, torch.optim.AdamW([p], lr=0.001))
    assert isinstance(sched, NoamHoldAnnealing)
    assert (sched.warmup_steps, sched.hold_steps, sched.decay_rate, sched.min_lr) == (200, 300, 1.0, 1e-5)


@pytest.mark.parametrize("scheduler_yaml, message", [
    ("scheduler: NoamHoldAnnealing\nscheduler_conf:\n  warmup_steps: 10\n",
     "scheduler_conf.max_steps: required by scheduler NoamHoldAnnealing"),
    ("scheduler: NoamHoldAnnealing\nscheduler_conf:\n  max_steps: 100\n",
     "scheduler NoamHoldAnnealing needs a warmup"),
    ("scheduler: NoamHoldAnnealing\nscheduler_conf:\n  max_steps: 100\n  warmup_steps: 10\n  warmup_ratio: 0.1\n",
     "warmup_steps or warmup_ratio, not both"),
    ("scheduler: warmuplr\nscheduler_conf:\n  warmup_steps: 10\n  decay_rate: 1.0\n",
     "scheduler_conf.decay_rate: scheduler warmuplr takes no such key"),
])
def test_scheduler_conf_checked_against_its_scheduler(tmp_path, scheduler_yaml, message):
    from asrkit.schema import ConfigError
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, scheduler_yaml)


@pytest.mark.parametrize("scheduler_yaml, message", [
    ("scheduler: NoamHoldAnnealing\nscheduler_conf:\n  max_steps: 100\n  warmup_ratio: 1.5\n",
     r"scheduler_conf.warmup_ratio: must be in \[0.0, 1.0\], got 1.5"),
    ("scheduler: warmuplr\nscheduler_conf:\n  warmup_steps: 0\n", "scheduler_conf.warmup_steps: must be > 0, got 0"),
])
def test_scheduler_conf_values_checked(tmp_path, scheduler_yaml, message):
    from asrkit.schema import ConfigError
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, scheduler_yaml)
