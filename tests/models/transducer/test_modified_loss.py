"""``model_conf.rnnt_type: modified``: the one-output-per-frame RNN-T lattice against every
alignment enumerated by hand, batching and padding, the utterances it cannot align, the
config key, and the searches that follow it (one symbol per frame)."""
from __future__ import annotations

import itertools

import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import ConfigError, build
from asrkit.decode.transducer_search import TransducerSearcher
from asrkit.models.transducer.loss import modified_rnnt_loss, rnnt_loss
from tests.models.tiny import TINY, merge
from tests.models.transducer.tiny import tiny_transducer


def enumerated_nll(log_probs: torch.Tensor, labels: list[int], blank: int) -> float:
    """−log Σ over every choice of the frames that emit the labels (in order, one a frame)
    of the product of the frames' probabilities: blank at (t, u) or label u+1 at (t, u)."""
    frames = log_probs.size(0)
    paths = []
    for chosen in itertools.combinations(range(frames), len(labels)):
        u, score = 0, 0.0
        for t in range(frames):
            if t in chosen:
                score += float(log_probs[t, u, labels[u]])
                u += 1
            else:
                score += float(log_probs[t, u, blank])
        paths.append(score)
    return -float(torch.logsumexp(torch.tensor(paths, dtype=torch.float64), 0))


def test_equals_the_sum_over_enumerated_alignments_with_padding():
    torch.manual_seed(0)
    lengths, targets = [5, 3], [[3, 1, 4], [2, 2]]
    logits = torch.randn(2, 5, 4, 6) * 2
    target = torch.tensor([[3, 1, 4], [2, 2, -1]])
    got = modified_rnnt_loss(logits, target, torch.tensor(lengths), torch.tensor([3, 2]), blank=0)
    log_probs = logits.log_softmax(-1)
    for b, (frames, labels) in enumerate(zip(lengths, targets)):
        want = enumerated_nll(log_probs[b, :frames, :len(labels) + 1], labels, blank=0)
        assert abs(float(got[b]) - want) < 1e-4, b
        alone = modified_rnnt_loss(logits[b:b + 1, :frames, :len(labels) + 1], target[b:b + 1, :len(labels)],
                                   torch.tensor([frames]), torch.tensor([len(labels)]), blank=0)
        assert abs(float(alone[0]) - float(got[b])) < 1e-5  # the batch's padding changes nothing
    # it is not the regular lattice (which also counts several symbols in one frame)
    regular = rnnt_loss(logits, target, torch.tensor(lengths), torch.tensor([3, 2]), blank=0)
    assert (regular - got).abs().min() > 1e-2
    assert torch.equal(rnnt_loss(logits, target, torch.tensor(lengths), torch.tensor([3, 2]), 0, "modified"), got)


def test_more_tokens_than_frames_gives_zero_and_finite_gradients():
    logits = torch.randn(2, 3, 5, 6, requires_grad=True)
    target = torch.tensor([[1, 2, 3, 4], [1, 2, -1, -1]])
    loss = modified_rnnt_loss(logits, target, torch.tensor([3, 3]), torch.tensor([4, 2]), blank=0)
    assert float(loss[0].detach()) == 0.0 and float(loss[1].detach()) > 0.0
    loss.sum().backward()
    assert torch.isfinite(logits.grad).all() and float(logits.grad[0].abs().sum()) == 0.0


def test_config_key_and_one_symbol_per_frame_searches():
    """``rnnt_type`` is a transducer key (refused for model: asr_model); a modified model's
    searcher caps the greedy search at one symbol per frame, a regular one does not."""
    with pytest.raises(ConfigError, match="model_conf.rnnt_type: read only by model: transducer"):
        build(TrainConfig, merge(TINY, {"model_conf": {"rnnt_type": "modified"}}))
    modified = tiny_transducer(model_conf={"rnnt_type": "modified"})
    regular = tiny_transducer()
    assert modified.rnnt_type == "modified" and regular.rnnt_type == "regular"
    torch.manual_seed(1)
    with torch.no_grad():
        modified.joint.ffn_out.bias.fill_(0.0)
        modified.joint.ffn_out.bias[0] = -20.0  # never blank: a regular search would emit many per frame
        regular.load_state_dict(modified.state_dict())
        enc = torch.randn(6, modified.joint.enc_ffn.in_features)
        for model, most in ((modified, 1), (regular, 64)):
            hyp = TransducerSearcher.of_model(model).initial(torch.device("cpu"))
            TransducerSearcher.of_model(model).greedy_feed(hyp, enc, 0, 64)
            assert max(hyp.frames.count(t) for t in set(hyp.frames)) == most
    batch = torch.randn(2, 9, 20), torch.tensor([9, 7])
    target, target_lengths = torch.tensor([[1, 2, 3], [4, 5, -1]]), torch.tensor([3, 2])
    out = modified(*batch, target, target_lengths)
    assert torch.isfinite(out["loss"]) and torch.isfinite(out["loss_rnnt"])
    out["loss"].backward()
