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
