"""The joint network (``asrkit.models.transducer.joint``): WeNet's formula for each
``joint_conf`` option, raw logits ``[B, T, U, V]``, and the projected-once path of a search."""
from __future__ import annotations

import pytest
import torch

from asrkit.models.transducer.joint import TransducerJoint

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread, immune to a busy machine


def inputs(enc: int = 6, pred: int = 5):
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 4, enc, generator=g), torch.randn(2, 3, pred, generator=g)


@torch.no_grad()
def test_joint_is_ffn_out_of_tanh_of_the_sum_of_projections():
    torch.manual_seed(0)
    joint = TransducerJoint(7, 6, 5, 8)
    enc, pred = inputs()
    out = joint(enc, pred)
    assert out.shape == (2, 4, 3, 7)
    for t in range(4):
        for u in range(3):
            want = joint.ffn_out(torch.tanh(joint.enc_ffn(enc[:, t]) + joint.pred_ffn(pred[:, u])))
            assert torch.allclose(out[:, t, u], want, atol=1e-6)


@torch.no_grad()
def test_postjoin_linear_comes_before_the_activation():
    torch.manual_seed(0)
    joint = TransducerJoint(7, 6, 5, 8, postjoin_linear=True, activation="relu")
    enc, pred = inputs()
    z = joint.enc_ffn(enc).unsqueeze(2) + joint.pred_ffn(pred).unsqueeze(1)
    assert torch.allclose(joint(enc, pred), joint.ffn_out(torch.relu(joint.post_ffn(z))), atol=1e-6)


@torch.no_grad()
def test_without_prejoin_linear_the_inputs_are_added_as_they_are():
    torch.manual_seed(0)
    joint = TransducerJoint(7, 8, 8, 8, prejoin_linear=False)
    assert joint.enc_ffn is None and joint.pred_ffn is None
    enc, pred = inputs(8, 8)
    assert torch.allclose(joint(enc, pred), joint.ffn_out(torch.tanh(enc.unsqueeze(2) + pred.unsqueeze(1))))
    with pytest.raises(ValueError, match="sizes must be equal"):
        TransducerJoint(7, 6, 8, 8, prejoin_linear=False)


@torch.no_grad()
def test_projected_once_and_pairs_of_a_beam_give_the_same_logits():
    torch.manual_seed(0)
    joint = TransducerJoint(7, 6, 5, 8)
    enc, pred = inputs()
    full = joint(enc, pred)
    enc_p, pred_p = joint.project_encoder(enc), joint.project_predictor(pred)
    assert torch.allclose(joint(enc_p, pred_p, pre_project=False), full, atol=1e-6)
    # one (frame, predictor position) pair per row: [N, 1, 1, D] + [N, 1, 1, D]
    pairs = joint(enc_p[:, 2].view(2, 1, 1, -1), pred_p[:, 1].view(2, 1, 1, -1), pre_project=False)
    assert torch.allclose(pairs[:, 0, 0], full[:, 2, 1], atol=1e-6)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit.script deprecation notice
@torch.no_grad()
def test_the_joint_scripts():
    torch.manual_seed(0)
    for joint in (TransducerJoint(7, 6, 5, 8), TransducerJoint(7, 8, 8, 8, prejoin_linear=False, postjoin_linear=True)):
        enc, pred = inputs(*((6, 5) if joint.prejoin_linear else (8, 8)))
        scripted = torch.jit.script(joint)
        assert torch.equal(scripted(enc, pred), joint(enc, pred))
        assert torch.equal(scripted.project_encoder(enc), joint.project_encoder(enc))
