"""CTC on host lengths (issue 57, item 3): the executor hands the batch's CPU lengths to
CTC so torch's CUDA CTC need not copy device lengths to the host (a host sync each).  The
lengths are the same numbers, so the loss and gradients must be bitwise those of the
device lengths; these tests force the host path on the CPU and compare."""
from __future__ import annotations

import pytest
import torch

from asrkit.models import asr_model, ctc
from asrkit.models.ctc import ctc_host_lengths, host_lengths
from tests.models.tiny import random_batch, tiny_model

LENGTHS = [37, 23, 30, 18]
TARGETS = [4, 2, 5, 3]


def loss_and_grads(model, batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(*batch)
    out["loss"].backward()
    return out["loss"].detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_the_encoder_derives_its_output_lengths_on_the_host():
    model = tiny_model()
    feats, lens, _, _ = random_batch(LENGTHS)
    _, enc_lengths = model.encode(feats, lens)
    assert torch.equal(model.encoder.host_output_lengths(lens), enc_lengths)
    # an encoder with a forward of its own (squeezeformer's time reduction): device lengths kept
    model.encoder.__class__ = type("OwnForward", (type(model.encoder),), {"forward": lambda self, *a: None})
    assert model.encoder.host_output_lengths(lens) is None
    from asrkit.models.squeezeformer import SqueezeformerEncoder  # (defer: only this check needs it)
    assert SqueezeformerEncoder.forward is not type(model.encoder).__mro__[1].forward


def test_host_lengths_apply_only_to_device_batches_of_the_same_size():
    model = tiny_model()
    _, lens, _, tlens = random_batch(LENGTHS, target_lengths=TARGETS)
    enc = model.encoder.host_output_lengths(lens)
    assert ctc_host_lengths(model.encoder, enc.to("meta"), tlens.to("meta")) is None  # outside the context
    with host_lengths(lens, tlens):
        assert ctc_host_lengths(model.encoder, enc, tlens) is None  # a CPU batch: nothing to save
        got = ctc_host_lengths(model.encoder, enc.to("meta"), tlens.to("meta"))  # (meta: a device's lengths)
        assert got is not None and torch.equal(got[0], enc) and got[1] is tlens
        assert ctc_host_lengths(model.encoder, enc[:2].to("meta"), tlens[:2].to("meta")) is None
    assert ctc.ctc_host_lengths(model.encoder, enc.to("meta"), tlens.to("meta")) is None  # reset on exit


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_the_loss_and_gradients_on_host_lengths_are_bitwise_the_same(monkeypatch, dtype):
    model = tiny_model(model_conf={"ctc_weight": 0.5, "lsm_weight": 0.1})
    batch = random_batch(LENGTHS, target_lengths=TARGETS)
    amp = torch.autocast("cpu", dtype=dtype) if dtype else torch.autocast("cpu", enabled=False)
    with amp:
        plain_loss, plain_grads = loss_and_grads(model, batch)
    seen = []
    real_ctc_loss = torch.nn.functional.ctc_loss

    def spy(log_probs, targets, input_lengths, target_lengths, **kwargs):
        seen.append((input_lengths, target_lengths))
        return real_ctc_loss(log_probs, targets, input_lengths, target_lengths, **kwargs)

    # as on a GPU: the model's lengths count as a device's, the host's copy is handed over
    monkeypatch.setattr(asr_model, "ctc_host_lengths",
                        lambda enc, el, tl: ctc_host_lengths(enc, el.to("meta"), tl.to("meta")))
    monkeypatch.setattr(ctc.F, "ctc_loss", spy)
    host_feats, host_targets = batch[1].clone(), batch[3].clone()
    with amp, host_lengths(host_feats, host_targets):
        host_loss, host_grads = loss_and_grads(model, batch)
    assert seen and seen[0][1] is host_targets  # CTC ran on the host's tensors
    assert torch.equal(seen[0][0], model.encoder.host_output_lengths(host_feats))
    assert torch.equal(plain_loss, host_loss)
    assert len(plain_grads) == len(host_grads) and all(torch.equal(a, b) for a, b in zip(plain_grads, host_grads))
