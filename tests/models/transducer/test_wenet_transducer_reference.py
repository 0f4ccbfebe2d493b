"""WeNet's transducer models computed in asrkit: the two tiny models WeNet trained
(``rnnt_offline``: conformer + LSTM predictor; ``rnnt_stateless_u2pp``: U2++ conformer +
stateless ``embedding`` predictor; both with a joint, CTC and a bidirectional decoder),
loaded from WeNet's ``train.yaml``/``config.yaml``, ``units.txt``, ``global_cmvn`` and
``epoch_5.pt`` as they are, fed WeNet's fbank features, give what WeNet computed (1e-4, max
abs): encoder output, CTC log-probabilities, the predictor's full forward and its
step-by-step path from ``init_state``, the joint's logits, each utterance's RNN-T loss, and
the batch's ``loss``, ``loss_rnnt``, ``loss_ctc``, ``loss_att`` and ``th_accuracy`` from the
loss dict of sums divided as the model's docstring says.  For the U2++ model also at chunk 4
with all left chunks (``chunk_*`` and ``forward_chunk``).

The offline model's batch differs from WeNet's by design in padded batches: WeNet's
convolution module zeroes padded frames *before* its first pointwise convolution, whose
bias then reaches the last 7 frames of the shorter utterances through the centred kernel
(``docs/wenet.md``, the ``cnn_module_norm`` row).  So its WeNet batch is compared with that
masking reproduced in the test (:func:`wenet_padded_convolution`), and asrkit's own batch
``loss_rnnt`` with the mean of WeNet's per-utterance losses (each utterance alone, which is
what asrkit computes in any batch).  The causal U2++ model has no such difference.
"""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from asrkit.models.layers import ConvolutionModule
from asrkit.models.transducer.loss import add_blank
from tests.models.transducer.wenet_transducer import (REFERENCES, load_reference, load_wenet_transducer,
                                                      reference_batch)

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread, immune to a busy machine

TOLERANCE = 1e-4


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and float((got.float() - want.float()).abs().max()) < TOLERANCE


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def wenet(request):
    return request.param, load_wenet_transducer(request.param), load_reference(request.param)


def test_wenet_configs_and_checkpoints_load_unchanged():
    """``config.yaml`` (what WeNet trained from) builds the same model as ``train.yaml``
    (what its trainer saved), and ``epoch_5.pt`` loads into both with every key matched."""
    for name in REFERENCES:
        saved, original = load_wenet_transducer(name), load_wenet_transducer(name, "config.yaml")
        assert saved.state_dict().keys() == original.state_dict().keys()
        assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), original.state_dict().values()))
        assert (saved.blank_id, saved.sos, saved.eos, saved.vocab_size) == (0, 2, 2, 19)
        assert (saved.transducer_weight, saved.ctc_weight, saved.attention_weight) == (0.75, 0.1, 0.15)


@torch.inference_mode()
def test_encoder_predictor_joint_and_rnnt_loss_match_wenet(wenet):
    name, model, reference = wenet
    assert reference["predictor_start_symbol"] == model.blank_id == reference["blank"]
    contexts = [("", 0)] + ([("chunk_", reference["chunk"])] if "chunk_encoder_out" in reference["utts"][0] else [])
    for utt in reference["utts"]:
        wav, feats = utt["wav"], utt["feats"].unsqueeze(0)
        tokens = torch.tensor([utt["tokens"]])
        pred_in = add_blank(tokens, model.blank_id)
        assert torch.equal(pred_in, utt["predictor_in"]), wav
        pred_out = model.predictor(pred_in)
        assert close(pred_out, utt["predictor_out"]), wav
        state = model.predictor.init_state(1, torch.device("cpu"))
        steps = []
        for i in range(pred_in.size(1)):
            out, state = model.predictor.forward_step(pred_in[:, i:i + 1], torch.zeros(1, 1), state)
            steps.append(out)
        assert close(torch.cat(steps, dim=1), utt["predictor_out_steps"]), wav
        for prefix, chunk in contexts:
            enc, lengths = model.encode(feats, torch.tensor([feats.size(1)]), chunk, reference["left"])
            assert close(enc, utt[prefix + "encoder_out"]), (wav, prefix)
            assert close(model.ctc_log_probs(enc), utt[prefix + "ctc_logprobs"]), (wav, prefix)
            assert close(model.joint(enc, pred_out), utt[prefix + "joint_out"]), (wav, prefix)
            loss = model.transducer_loss(enc, lengths, tokens, torch.tensor([tokens.size(1)]))
            assert loss.dtype == torch.float32
            assert abs(float(loss) - utt[prefix + "rnnt_loss"]) < TOLERANCE, (wav, prefix)


def wenet_losses(out: dict) -> dict:
    """The loss dict of sums as WeNet's numbers for one batch (the model's docstring)."""
    n = out["num_utts"]
    return {"loss": out["loss"] / n, "loss_rnnt": out["loss_rnnt"] / n, "loss_ctc": out["loss_ctc"] / n,
            "loss_att": out["loss_att"] / n, "th_accuracy": out["acc_correct"] / out["acc_total"]}


def assert_batch_matches(got: dict, want: dict, what: str) -> None:
    for key in ("loss", "loss_rnnt", "loss_ctc", "loss_att", "th_accuracy"):
        assert abs(float(got[key]) - float(want[key])) < TOLERANCE, (what, key, float(got[key]), float(want[key]))


def wenet_padded_convolution(self: ConvolutionModule, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """WeNet's centred convolution module on a padded batch: padded frames zeroed before the
    first pointwise convolution (asrkit zeroes them after the GLU), see the module docstring."""
    assert not self.causal
    valid = mask.transpose(1, 2)
    x = F.linear(x.masked_fill(~valid, 0.0), self.pointwise_conv1.weight.squeeze(-1), self.pointwise_conv1.bias)
    x = F.conv1d(F.glu(x, dim=-1).transpose(1, 2), self.depthwise_conv.weight, self.depthwise_conv.bias,
                 padding=self.padding[0], groups=self.channels)
    return self.after_depthwise(x).masked_fill(~valid, 0.0)


@torch.inference_mode()
def test_batch_losses_match_wenet(wenet, monkeypatch):
    name, model, reference = wenet
    batch = reference_batch(reference)
    if name == "rnnt_stateless_u2pp":
        assert_batch_matches(wenet_losses(model(*batch)), reference["forward_full"], "full")
        chunked = model(*batch, reference["chunk"], reference["left"])
        assert_batch_matches(wenet_losses(chunked), reference["forward_chunk"], "chunk")
        return
    own = wenet_losses(model(*batch))
    alone = sum(utt["rnnt_loss"] for utt in reference["utts"]) / len(reference["utts"])
    assert abs(float(own["loss_rnnt"]) - alone) < TOLERANCE
    monkeypatch.setattr(ConvolutionModule, "forward", wenet_padded_convolution)
    assert_batch_matches(wenet_losses(model(*batch)), reference["forward_full"], "full, WeNet's padding")



def test_a_wenet_checkpoint_loads_into_a_pure_transducer_without_its_untrained_heads():
    """WeNet saves ``ctc.*`` and ``decoder.*`` whatever their loss weights; a config with
    weight 0 for both (WeNet's default transducer) builds neither, and the checkpoint loads
    without them, every other weight WeNet's."""
    pure = ["model_conf.transducer_weight=1.0", "model_conf.ctc_weight=0.0", "model_conf.attention_weight=0.0"]
    model = load_wenet_transducer("rnnt_offline", overrides=pure)
    assert model.ctc is None and model.decoder is None
    full = load_wenet_transducer("rnnt_offline").state_dict()
    assert all(torch.equal(value, full[key]) for key, value in model.state_dict().items())
