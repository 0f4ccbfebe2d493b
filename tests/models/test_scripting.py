"""Encoder, CTC head and decoders compile with TorchScript (for export) and agree with eager."""
import warnings

import pytest
import torch

from tests.models.tiny import random_batch, tiny_model


@pytest.mark.parametrize("encoder", ["conformer"])
def test_modules_script_and_match_eager(encoder):
    model = tiny_model(encoder=encoder, decoder="bitransformer", decoder_conf={"r_num_blocks": 1},
                       model_conf={"reverse_weight": 0.3}).eval()
    feats, lengths, _, _ = random_batch([50, 30])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script deprecation notice
        scripted_encoder = torch.jit.script(model.encoder)
        scripted_ctc = torch.jit.script(model.ctc)
        scripted_decoder = torch.jit.script(model.decoder)
    with torch.no_grad():
        out, out_lengths = model.encoder(feats, lengths)
        s_out, s_lengths = scripted_encoder(feats, lengths)
        torch.testing.assert_close(s_out, out)
        assert torch.equal(s_lengths, out_lengths)
        torch.testing.assert_close(scripted_ctc(out), model.ctc(out))
        mask = (torch.arange(out.size(1)) < out_lengths.unsqueeze(1)).unsqueeze(1)
        ys = torch.tensor([[model.sos, 3, 4], [model.sos, 5, model.eos]])
        ys_lengths = torch.tensor([3, 2])
        expected = model.decoder(out, mask, ys, ys_lengths, ys)
        got = scripted_decoder(out, mask, ys, ys_lengths, ys)
        torch.testing.assert_close(got[0], expected[0])
        torch.testing.assert_close(got[1], expected[1])


@pytest.mark.parametrize("encoder,conf", [
    ("conformer", {"causal": True, "cnn_module_norm": "layer_norm"}),
    ("conformer", {"causal": True, "pos_enc_layer_type": "rel_pos_xl"}),
    ("transformer", {}),
])
def test_streaming_encoder_scripts_and_matches_eager(encoder, conf):
    model = tiny_model(encoder=encoder, encoder_conf=conf).eval()
    feats, lengths, _, _ = random_batch([60, 30])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.script(model.encoder)
    empty = torch.zeros(0, 0, 0, 0)
    with torch.no_grad():
        torch.testing.assert_close(scripted(feats, lengths, 4, 1)[0], model.encoder(feats, lengths, 4, 1)[0])
        state = (empty, empty)
        eager_state = (empty, empty)
        for step, start in enumerate(range(0, 60 - 19 + 1, 16)):  # chunks of 4 encoder frames
            chunk = feats[:1, start:start + 19]
            mask = torch.ones(1, 1, state[0].size(2) + 4, dtype=torch.bool)
            ys, att, cnn = scripted.forward_chunk(chunk, 4 * step, 8, state[0], state[1], mask)
            want, e_att, e_cnn = model.encoder.forward_chunk(chunk, 4 * step, 8, *eager_state, mask)
            torch.testing.assert_close(ys, want)
            torch.testing.assert_close(att, e_att)
            torch.testing.assert_close(cnn, e_cnn)
            state, eager_state = (att, cnn), (e_att, e_cnn)
