"""asrkit.models.layers.Dropout: the cheap-mask inverted dropout."""
import pytest
import torch

from asrkit.models.layers import Dropout


def test_drop_rate_expectation_eval_and_seeding():
    d = Dropout(0.1)
    x = torch.ones(400_000)
    torch.manual_seed(0)
    y = d(x)
    dropped = (y == 0).float().mean().item()
    assert dropped == pytest.approx(0.1, abs=0.003)
    assert y.mean().item() == pytest.approx(1.0, abs=0.01)              # inverted scaling
    values = torch.unique(y).tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(65536 / (65536 - 6554))
    torch.manual_seed(0)
    assert torch.equal(d(x), y)                                         # global RNG, seeded
    d.eval()
    assert d(x) is x
    assert Dropout(0.0).train()(x) is x


def test_gradient_flows_through_kept_elements_only():
    d = Dropout(0.5)
    x = torch.randn(64, 33, requires_grad=True)  # numel not a multiple of 4
    y = d(x)
    y.sum().backward()
    kept = y != 0
    assert torch.all(x.grad[kept] == 2.0) and torch.all(x.grad[~kept] == 0.0)
    with pytest.raises(ValueError):
        Dropout(1.0)
