"""LoRA layers (asrkit.models.lora): where WeNet's options put them, that a fresh adapter
changes nothing, and that merging gives the unmerged outputs."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from asrkit.finetune.schema import LoraConf
from asrkit.models.lora import (LoraLinear, LoraPlacementError, inject_lora, lora_record, lora_targets,
                                merge_lora_state)
from tests.finetune.test_freeze import small_model


def test_a_fresh_adapter_leaves_the_output_exactly_as_it_was():
    base = nn.Linear(6, 5)
    x = torch.randn(3, 6)
    want = base(x)
    lora = LoraLinear(base, rank=2, alpha=4.0)
    assert lora.weight is base.weight and lora.bias is base.bias  # (the layer's own tensors, same names)
    assert torch.equal(lora(x), want)
    reinit = LoraLinear(nn.Linear(6, 5), rank=2, alpha=4.0, reinit=True)
    assert reinit.lora_B.abs().sum() > 0  # non-zero adapters, the weight offset to match
    plain = nn.Linear(6, 5)
    plain.weight.data, plain.bias.data = reinit.weight.data + reinit.delta(), reinit.bias.data
    torch.testing.assert_close(reinit(x), plain(x), rtol=0, atol=1e-6)


def test_wenets_options_place_adapters_on_the_attention_linears():
    model = small_model()
    conf = LoraConf()
    names = lora_targets(model, conf.lora_modules, conf.lora_attn_attr, conf.lora_list)
    # WeNet's defaults: the encoder blocks' self-attention, four linears each (no src_attn there)
    assert names == [f"encoder.encoders.{i}.self_attn.{lin}" for i in range(2)
                     for lin in ("linear_out", "linear_q", "linear_k", "linear_v")]
    both = lora_targets(model, ["encoder.encoders", "decoder.decoders"], ["self_attn", "src_attn"], ["linear_q"])
    assert sum(".src_attn." in n for n in both) == 1 and len(both) == 4
    with pytest.raises(LoraPlacementError, match="no module 'encoder.blocks'"):
        lora_targets(model, ["encoder.blocks"], ["self_attn"], ["linear_q"])
    with pytest.raises(LoraPlacementError, match="places no adapter"):
        lora_targets(model, ["encoder.encoders"], ["self_attn"], ["linear_x"])


def test_merged_weights_give_the_unmerged_models_outputs():
    model = small_model().eval()
    feats, lengths = torch.randn(2, 40, 40), torch.tensor([40, 31])
    with torch.no_grad():
        before, _ = model.encoder(feats, lengths)
    conf = LoraConf(lora_modules=["encoder.encoders", "decoder.decoders"], lora_rank=3, lora_alpha=6.0)
    inject_lora(model, conf, seed=1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".lora_B"):
                p.normal_()  # (trained adapters: a zero B would merge to nothing)
    merged = small_model().eval()
    merged.load_state_dict(merge_lora_state(model.state_dict(), lora_record(model)))
    with torch.no_grad():
        want, _ = model.encoder(feats, lengths)
        got, _ = merged.encoder(feats, lengths)
    assert (want - before).abs().max() > 0.01  # (the adapters do change the outputs)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
