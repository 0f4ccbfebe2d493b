"""CTC over the batch's labels (asrkit.models.ctc.LabelSubsetLogProbs): on the CPU a large
vocabulary's CTC is computed over the blank and the targets only.  It must give the full
vocabulary's loss and gradient: compared here in float64, where both are exact, with the
cases that touch the gradient's edges (a frame beyond an utterance's length, a target too
long for its frames that ``zero_infinity`` zeroes, an empty target, −1 padding, per-utterance
weights)."""
from __future__ import annotations

import pytest
import torch

from asrkit.models import ctc
from asrkit.models.ctc import CTC, LabelSubsetLogProbs

VOCAB = 3000
BLANK = 7


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    enc_out = torch.randn(4, 20, 16, generator=g, dtype=torch.float64)
    enc_lengths = torch.tensor([20, 14, 3, 9])
    target = torch.full((4, 6), -1)
    target[0, :6] = torch.tensor([5, 900, 900, 2999, 0, 5])
    target[1, :4] = torch.tensor([17, 18, 17, 1200])
    target[2, :5] = torch.tensor([1, 2, 3, 4, 5])   # 5 labels in 3 frames: infinite, zeroed
    lengths = torch.tensor([6, 4, 5, 0])            # the last utterance: an empty target
    return enc_out, enc_lengths, target, lengths


def loss_and_grads(head: CTC) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    enc_out, enc_lengths, target, lengths = batch()
    enc_out.requires_grad_(True)
    head.zero_grad(set_to_none=True)
    loss = head.loss(enc_out, enc_lengths, target, lengths)
    (loss * torch.tensor([1.0, 0.5, 2.0, 3.0], dtype=torch.float64)).sum().backward()
    return loss.detach(), enc_out.grad, [p.grad for p in head.parameters()]


def test_the_label_subset_gives_the_full_vocabularys_loss_and_gradient(monkeypatch):
    torch.manual_seed(0)
    head = CTC(VOCAB, 16, blank_id=BLANK).double()
    subset = loss_and_grads(head)
    monkeypatch.setattr(ctc, "SUBSET_MIN_VOCAB", VOCAB + 1)  # the full log-softmax path
    full = loss_and_grads(head)
    assert subset[0][2] == 0 and torch.isfinite(subset[0]).all()
    torch.testing.assert_close(subset[0], full[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(subset[1], full[1], rtol=1e-10, atol=1e-10)
    for a, b in zip(subset[2], full[2]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_the_subset_path_is_the_one_taken_for_a_large_vocabulary_on_the_cpu():
    enc_out, enc_lengths, target, lengths = batch()
    taken = []
    original = LabelSubsetLogProbs.forward

    def spy(ctx, logits, labels):
        taken.append(labels.tolist())
        return original(ctx, logits, labels)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LabelSubsetLogProbs, "forward", staticmethod(spy))
        CTC(VOCAB, 16, blank_id=BLANK).double().loss(enc_out, enc_lengths, target, lengths)
        CTC(64, 16, blank_id=BLANK).double().loss(enc_out, enc_lengths, target.remainder(64), lengths)
    assert taken == [[0, 1, 2, 3, 4, 5, BLANK, 17, 18, 900, 1200, 2999]]  # the small vocabulary: full
