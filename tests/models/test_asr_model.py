
import pytest
import torch
import torch.nn.functional as F

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.models import build_model, count_parameters
from asrkit.models.asr_model import add_sos_eos, reverse_padded
from asrkit.models.losses import label_smoothing_loss
from tests.models.tiny import random_batch, tiny_model
from asrkit.text.vocabulary import Vocabulary


def test_loss_is_batch_sum_of_per_utterance_losses():
    model = tiny_model().eval()
    batch = random_batch([40, 33, 27], target_lengths=[3, 5, 2])
    out = model(*batch)
    feats, feats_lengths, target, target_lengths = batch
    singles = [model(feats[i:i + 1, :feats_lengths[i]], feats_lengths[i:i + 1],
                     target[i:i + 1, :target_lengths[i]], target_lengths[i:i + 1]) for i in range(3)]
    for key in ("loss", "loss_ctc", "loss_att"):
        torch.testing.assert_close(out[key], sum(s[key] for s in singles), atol=1e-4, rtol=1e-5)
    assert int(out["num_utts"]) == 3
    assert int(out["num_tokens"]) == (3 + 1) + (5 + 1) + (2 + 1)
    assert int(out["acc_total"]) == int(out["num_tokens"])
    torch.testing.assert_close(out["loss"], 0.3 * out["loss_ctc"] + 0.7 * out["loss_att"])


def test_length_normalized_loss_is_wenets():
    """WeNet with length_normalized_loss: CTC averaged over utterances, attention over
    tokens (wenet/transformer/ctc.py, label_smoothing_loss.py): the loss the trainer gets by
    dividing by the token count is exactly that for one batch."""
    batch = random_batch([40, 33, 27], target_lengths=[3, 5, 2])
    plain = tiny_model(model_conf={"length_normalized_loss": False}).eval()(*batch)
    out = tiny_model(model_conf={"length_normalized_loss": True}).eval()(*batch)
    utts, tokens = 3, (3 + 1) + (5 + 1) + (2 + 1)
    wenet = 0.3 * plain["loss_ctc"] / utts + 0.7 * plain["loss_att"] / tokens
    torch.testing.assert_close(out["loss"] / out["num_tokens"], wenet)
    torch.testing.assert_close(out["loss_ctc"] / tokens, plain["loss_ctc"] / utts)  # reported per utterance
    torch.testing.assert_close(out["loss"], 0.3 * out["loss_ctc"] + 0.7 * out["loss_att"])


def test_label_smoothing_loss_matches_kl_divergence():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 7)
    target = torch.tensor([[1, 2, 3, -1], [4, 5, -1, -1]])
    eps = 0.1
    expected = torch.zeros(2)
    for b in range(2):
        for t in range(4):
            if target[b, t] < 0:
                continue
            q = torch.full((7,), eps / 6)
            q[target[b, t]] = 1 - eps
            expected[b] += F.kl_div(torch.log_softmax(logits[b, t], -1), q, reduction="sum")
    torch.testing.assert_close(label_smoothing_loss(logits, target, eps), expected)
    ce = F.cross_entropy(logits.view(-1, 7), target.view(-1), ignore_index=-1, reduction="sum")
    torch.testing.assert_close(label_smoothing_loss(logits, target, 0.0).sum(), ce)


def test_sos_eos_and_reverse_helpers():
    target = torch.tensor([[3, 4, 5], [6, -1, -1]])
    lengths = torch.tensor([3, 1])
    ys_in, ys_out = add_sos_eos(target, lengths, 9)
    assert ys_in.tolist() == [[9, 3, 4, 5], [9, 6, 9, 9]]
    assert ys_out.tolist() == [[3, 4, 5, 9], [6, 9, -1, -1]]
    assert reverse_padded(target, lengths).tolist() == [[5, 4, 3], [6, -1, -1]]


def test_ctc_loss_is_fp32_under_autocast(monkeypatch):
    """Under autocast the CTC loss itself runs in fp32 with autocast off (not only its output
    cast back): the log-probabilities it sees are fp32, and the value equals an fp32
    computation from the same (bf16) logits."""
    import asrkit.models.ctc as ctc_module
    model = tiny_model().train()
    batch = random_batch([50, 30])
    seen = []
    real_ctc_loss = ctc_module.F.ctc_loss

    def spy(log_probs, *args, **kwargs):
        seen.append((log_probs.dtype, torch.is_autocast_enabled("cpu")))
        return real_ctc_loss(log_probs, *args, **kwargs)

    monkeypatch.setattr(ctc_module.F, "ctc_loss", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(*batch)
        enc_out, enc_lengths = model.encode(batch[0], batch[1])
        logits = model.ctc.ctc_lo(enc_out)
    assert logits.dtype == torch.bfloat16  # autocast really was on for the projection
    assert seen and all(dtype == torch.float32 and not autocast for dtype, autocast in seen), seen
    assert out["loss_ctc"].dtype == torch.float32
    reference = real_ctc_loss(torch.log_softmax(logits.float(), dim=-1).transpose(0, 1), batch[2].clamp(min=0),
                              enc_lengths, batch[3], blank=0, reduction="none", zero_infinity=True).sum()
    torch.testing.assert_close(out["loss_ctc"], reference, rtol=1e-6, atol=1e-4)
    assert torch.isfinite(out["loss"])
    out["loss"].backward()


@pytest.mark.parametrize("ctc_weight", [0.0, 1.0])
def test_unused_branch_is_not_built(ctc_weight):
    model = tiny_model(model_conf={"ctc_weight": ctc_weight}).train()
    out = model(*random_batch([40, 30]))
    out["loss"].backward()
    assert all(p.grad is not None for p in model.parameters())
    if ctc_weight == 0.0:
        assert model.ctc is None and out["loss_ctc"] is None
        torch.testing.assert_close(out["loss"], out["loss_att"])
    else:
        assert model.decoder is None and out["loss_att"] is None and out["acc_total"] is None
        torch.testing.assert_close(out["loss"], out["loss_ctc"])


def test_empty_batch_gives_zero_loss_connected_to_every_parameter():
    model = tiny_model().train()
    out = model(torch.zeros(0, 0, 20), torch.zeros(0, dtype=torch.long),
                torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert float(out["loss"].detach()) == 0.0 and int(out["num_utts"]) == 0
    out["loss"].backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) == 0.0 for p in model.parameters())


def test_bidirectional_decoder_mixes_reverse_loss():
    model = tiny_model(decoder="bitransformer", decoder_conf={"r_num_blocks": 1},
                       model_conf={"reverse_weight": 0.4}).eval()
    batch = random_batch([40, 30], target_lengths=[4, 2])
    out = model(*batch)
    out["loss"].backward()
    assert all(p.grad is not None for p in model.parameters())
    model.reverse_weight = 0.0
    forward_only = model(*batch)["loss_att"]
    assert not torch.allclose(out["loss_att"], forward_only)


def test_config_consistency_errors():
    with pytest.raises(ValueError, match="bitransformer"):
        tiny_model(model_conf={"reverse_weight": 0.3})
    with pytest.raises(ValueError, match="reverse_weight > 0"):
        tiny_model(decoder="bitransformer", decoder_conf={"r_num_blocks": 1})
    cfg = build(TrainConfig, {"input_dim": 80})
    with pytest.raises(ValueError, match="input_dim 80"):
        build_model(cfg, 40, Vocabulary.of_size(10))


def test_global_cmvn_from_json(tmp_path):
    # per dim: mean 2 / std 3 and mean -1 / std 0.5, over 4 frames; 8 dims
    stats = {"mean_stat": [2.0 * 4, -1.0 * 4] * 4, "var_stat": [(4.0 + 9.0) * 4, (1.0 + 0.25) * 4] * 4,
             "frame_num": 4}
    path = tmp_path / "global_cmvn"
    path.write_text(__import__("json").dumps(stats))
    cfg = build(TrainConfig, {"encoder_conf": {"output_size": 16, "num_blocks": 1, "attention_heads": 2,
                                               "linear_units": 16},
                              "decoder_conf": {"num_blocks": 1, "linear_units": 16, "attention_heads": 2},
                              "cmvn": "global_cmvn", "cmvn_conf": {"cmvn_file": str(path)}})
    model = build_model(cfg, 8, Vocabulary.of_size(5))
    x = torch.tensor([[[5.0, -0.5] * 4]])
    torch.testing.assert_close(model.cmvn(x), torch.ones(1, 1, 8))
    assert "cmvn.mean" in model.state_dict()


def test_parameter_counts_of_shipped_configs():
    from asrkit.config import read_yaml
    from pathlib import Path
    conf = Path(__file__).resolve().parents[2] / "conf"
    counts = {}
    for name in ("train_conformer.yaml", "train_conformer_small.yaml"):
        raw = read_yaml(conf / name)
        sections = {k: raw[k] for k in ("encoder", "encoder_conf", "decoder", "decoder_conf", "model_conf")}
        counts[name] = count_parameters(build_model(build(TrainConfig, sections), 80, Vocabulary.of_size(4233)))
    assert counts["train_conformer.yaml"] == 46_197_266
    assert counts["train_conformer_small.yaml"] == 6_450_162
