"""Whisper's front end in asrkit (``input_layer: conv1d2``, ``abs_pos_whisper``): padding
in a batch changes no valid output frame, and the lengths are ``ceil(T / 2)``."""
from __future__ import annotations

import torch

from asrkit.models.encoder import TransformerEncoder
from asrkit.models.schema import EncoderConf


def test_batch_padding_changes_no_valid_frame():
    torch.manual_seed(0)
    conf = EncoderConf(output_size=16, attention_heads=2, linear_units=32, num_blocks=2, dropout_rate=0.0,
                       positional_dropout_rate=0.0, input_layer="conv1d2", pos_enc_layer_type="abs_pos_whisper",
                       activation_type="gelu", key_bias=False)
    encoder = TransformerEncoder(8, conf).eval()
    assert encoder.encoders[0].self_attn.linear_k.bias is None
    lengths = torch.tensor([41, 40, 17])
    feats = torch.randn(3, 41, 8)
    with torch.no_grad():
        out, out_lengths = encoder(feats, lengths)
        assert out_lengths.tolist() == [21, 20, 9]
        for b, n in enumerate(lengths.tolist()):
            alone, _ = encoder(feats[b:b + 1, :n], lengths[b:b + 1])
            torch.testing.assert_close(out[b, :out_lengths[b]], alone[0], atol=1e-5, rtol=0)
