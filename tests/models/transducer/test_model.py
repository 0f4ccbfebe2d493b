"""The transducer model (``asrkit.models.transducer.model``) and its config keys: the loss
dict of batch sums with WeNet's weights and normalisation, the RNN-T loss in fp32 under
autocast, the heads left out at weight 0, training, and the one-line refusals (k2, a
transducer without predictor, keys of the wrong predictor kind or model, a torchaudio
without ``rnnt_loss``)."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import ConfigError, build
from asrkit.models import build_model
from asrkit.models.transducer import loss as transducer_loss
from asrkit.models.transducer.loss import RnntLossUnavailable, rnnt_loss
from asrkit.models.transducer.predictor import ConvPredictor, EmbeddingPredictor, RNNPredictor
from asrkit.text.vocabulary import Vocabulary
from tests.models.tiny import TINY, merge, random_batch
from tests.models.transducer.tiny import TINY_TRANSDUCER, tiny_transducer, tiny_transducer_config

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread, immune to a busy machine


def refusal(**sections) -> str:
    """The message of the ConfigError of the tiny transducer config with ``sections``."""
    with pytest.raises(ConfigError) as e:
        tiny_transducer_config(**sections)
    return str(e.value)


@torch.no_grad()
def test_loss_dict_is_batch_sums_weighted_as_wenet():
    model = tiny_transducer().eval()
    batch = random_batch([30, 22, 26], target_lengths=[4, 2, 3])
    out = model(*batch)
    assert list(out)[:1] == ["loss_rnnt"] and out["num_utts"] == 3 and out["num_tokens"] == 4 + 2 + 3 + 3
    assert torch.allclose(out["loss"], 0.75 * out["loss_rnnt"] + 0.1 * out["loss_ctc"] + 0.15 * out["loss_att"])
    assert out["loss_rnnt"].dtype == torch.float32
    # each utterance alone gives its share of the sums (asrkit's batch does not change an utterance)
    feats, lengths, target, target_lengths = batch
    alone = [model(feats[i:i + 1, :lengths[i]], lengths[i:i + 1], target[i:i + 1, :target_lengths[i]],
                   target_lengths[i:i + 1]) for i in range(3)]
    for key in ("loss", "loss_rnnt", "loss_ctc", "loss_att"):
        assert torch.allclose(out[key], sum(a[key] for a in alone), rtol=1e-4), key


@torch.no_grad()
def test_length_normalized_loss_keeps_rnnt_and_ctc_per_utterance():
    """Divided by ``num_tokens`` the loss is WeNet's: RNN-T and CTC averaged over utterances,
    the attention loss over tokens."""
    batch = random_batch([30, 22], target_lengths=[4, 2])
    plain = tiny_transducer().eval()(*batch)
    normalized = tiny_transducer(model_conf={"length_normalized_loss": True}).eval()(*batch)
    n, tokens = plain["num_utts"], plain["num_tokens"]
    wenet = 0.75 * plain["loss_rnnt"] / n + 0.1 * plain["loss_ctc"] / n + 0.15 * plain["loss_att"] / tokens
    assert torch.allclose(normalized["loss"] / tokens, wenet, rtol=1e-5)
    assert torch.allclose(normalized["loss_rnnt"] / tokens, plain["loss_rnnt"] / n, rtol=1e-5)


def test_rnnt_loss_is_fp32_under_bf16_autocast():
    model = tiny_transducer().eval()
    feats, lengths, target, target_lengths = random_batch([30, 22], target_lengths=[4, 2])
    with torch.no_grad():
        want = model(feats, lengths, target, target_lengths)["loss_rnnt"]
    seen = {}
    joint = model.joint.forward
    model.joint.forward = lambda *a, **k: seen.setdefault("logits", joint(*a, **k))
    model.predictor.rnn.register_forward_hook(lambda m, args, out: seen.update(rnn=(args[0].dtype, out[0].dtype)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(feats, lengths, target, target_lengths)
    # the LSTM in fp32 on every CPU (oneDNN's bf16 LSTM fails where the CPU lacks native bf16)
    assert seen["rnn"] == (torch.float32, torch.float32)
    assert seen["logits"].dtype == torch.bfloat16  # the joint ran under autocast ...
    assert out["loss_rnnt"].dtype == torch.float32  # ... the loss did not
    assert torch.allclose(out["loss_rnnt"], want, rtol=3e-2)
    out["loss"].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.joint.parameters())
    logits = torch.randn(1, 3, 2, 5).bfloat16()
    args = (torch.tensor([[1]]), torch.tensor([3]), torch.tensor([1]), 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert rnnt_loss(logits, *args).dtype == torch.float32
    assert torch.equal(rnnt_loss(logits, *args), rnnt_loss(logits.float(), *args))


def test_the_model_trains():
    torch.manual_seed(0)
    model = tiny_transducer(predictor_conf={"embed_dropout": 0.1})
    batch = random_batch([30, 24], target_lengths=[3, 2])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        out = model(*batch)
        optimizer.zero_grad()
        (out["loss"] / out["num_utts"]).backward()
        optimizer.step()
        losses.append(float(out["loss_rnnt"].detach() / out["num_utts"]))
    assert losses[-1] < 0.7 * losses[0], losses
    assert all(p.grad is not None for p in model.parameters())  # every parameter takes part


def test_heads_with_weight_zero_are_left_out():
    model = tiny_transducer(model_conf={"transducer_weight": 1.0, "ctc_weight": 0.0, "attention_weight": 0.0})
    assert model.ctc is None and model.decoder is None
    out = model(*random_batch([30, 22]))
    assert out["loss_ctc"] is None and out["loss_att"] is None and out["acc_total"] is None
    assert torch.equal(out["loss"], out["loss_rnnt"])
    empty = model(torch.zeros(0, 10, 20), torch.zeros(0, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long),
                  torch.zeros(0, dtype=torch.long))
    assert float(empty["loss_rnnt"].detach()) == 0.0 and empty["num_utts"] == 0
    empty["loss"].backward()  # still connected to every parameter (DDP)


@pytest.mark.parametrize("kind,conf,cls", [
    ("rnn", {"rnn_type": "gru"}, RNNPredictor),
    ("embedding", {"n_head": 2, "hidden_size": None, "num_layers": None}, EmbeddingPredictor),
    ("conv", {"history_size": 1, "hidden_size": None, "num_layers": None}, ConvPredictor),
])
def test_every_predictor_kind_builds_and_gives_a_finite_loss(kind, conf, cls):
    model = tiny_transducer(predictor=kind, predictor_conf=conf)
    assert type(model.predictor) is cls
    assert torch.isfinite(model(*random_batch([30, 22]))["loss"])


def test_predictor_conf_is_checked_for_its_kind():
    assert "predictor_conf.hidden_size: predictor embedding takes no such key" in refusal(
        predictor="embedding", predictor_conf={"n_head": 2})
    assert "predictor_conf.n_head: required by predictor embedding" in refusal(
        predictor="embedding", predictor_conf={"hidden_size": None, "num_layers": None})
    assert "predictor: must be one of ['conv', 'embedding', 'rnn'], got 'lstm'" in refusal(predictor="lstm")
    assert "joint_conf.join_dim: required" in refusal(joint_conf={"join_dim": None})


def test_enable_k2_and_the_delay_penalty_are_refused_in_one_line():
    for key, value in (("enable_k2", True), ("delay_penalty", 0.1)):
        message = refusal(model_conf={key: value})
        assert "\n" not in message and f"model_conf.{key}" in message and "k2" in message, message
    notes: list[str] = []
    build(TrainConfig, merge(TINY_TRANSDUCER, {"model_conf": {"enable_k2": False, "lm_only_scale": 0.25,
                                                              "am_only_scale": 0.0, "warmup_steps": 25000}}),
          notes=notes)
    assert any(n.startswith("model_conf.lm_only_scale: 0.25 (WeNet's default; it acts only in k2's pruned")
               for n in notes), notes


@pytest.mark.parametrize("key,value", [("lm_only_scale", 0.5), ("am_only_scale", 0.1), ("warmup_steps", 1000)])
def test_k2_only_scales_other_than_wenets_defaults_are_refused_in_one_line(key, value):
    """WeNet reads them only in k2's pruned loss: a value other than its default could have no effect."""
    message = refusal(model_conf={key: value})
    assert "\n" not in message and f"model_conf.{key}: {value} is not supported" in message, message
    assert "acts only in k2's pruned RNN-T loss" in message and "asrkit does not have" in message, message


def test_a_transducer_without_predictor_is_refused_in_one_line():
    raw = merge(TINY, {"model": "transducer"})
    with pytest.raises(ConfigError) as e:
        build(TrainConfig, raw)
    assert "\n" not in str(e.value) and "model: transducer needs a predictor" in str(e.value)


def test_weights_must_sum_to_one_and_belong_to_the_transducer():
    message = refusal(model_conf={"attention_weight": None})
    assert "transducer_weight + ctc_weight + attention_weight must be 1" in message and "\n" not in message
    with pytest.raises(ConfigError, match="predictor: read only by model: transducer"):
        build(TrainConfig, merge(TINY, {"predictor": "rnn"}))
    with pytest.raises(ConfigError, match="model_conf.transducer_weight: read only by model: transducer"):
        build(TrainConfig, merge(TINY, {"model_conf": {"transducer_weight": 0.5}}))


def test_a_torchaudio_without_rnnt_loss_is_refused_in_one_line_when_the_model_is_built(monkeypatch):
    cfg = tiny_transducer_config()
    monkeypatch.setattr(transducer_loss, "_torchaudio_rnnt_loss", None)
    with pytest.raises(RnntLossUnavailable) as e:
        build_model(cfg, 20, Vocabulary.of_size(12))
    assert "\n" not in str(e.value) and "torchaudio.functional.rnnt_loss" in str(e.value)
    assert "torchaudio 2." in str(e.value)
