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
