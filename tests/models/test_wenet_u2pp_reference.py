"""WeNet's U2++ model (``tests/fixtures/wenet/u2pp``) streamed in asrkit reproduces WeNet's
chunked references (``/work/shared/wenet_reference/README.md``), for chunk 4 with all left
chunks (``reference_chunk4.pt``) and with two (``reference_chunk4_left2.pt``): the
chunk-masked full forward (``chunk_encoder_out``) and the chunk-by-chunk forward with
caches (``chunk_by_chunk_encoder_out``) to 1e-4, and the four decoding modes on the masked
encoder output give WeNet's ``decode_chunk`` tokens (scores to 1e-3)."""
from __future__ import annotations

import pytest
import torch

from tests.models.wenet_reference import FIXTURES, assert_four_modes_match, load_wenet_model


@pytest.fixture(scope="module")
def model():
    return load_wenet_model("u2pp")


@pytest.fixture(scope="module", params=["reference_chunk4.pt", "reference_chunk4_left2.pt"])
def reference(request):
    return torch.load(FIXTURES / "u2pp" / request.param, weights_only=True)


@torch.inference_mode()
def test_chunk_masked_and_chunk_by_chunk_encoder_outputs_match_wenet(model, reference):
    chunk, left = reference["chunk"], reference["left"]
    for utt in reference["utts"]:
        feats = utt["feats"].unsqueeze(0)
        masked, _ = model.encode(feats, torch.tensor([feats.size(1)]), chunk, left)
        assert masked.shape == utt["chunk_encoder_out"].shape, utt["wav"]
        assert (masked - utt["chunk_encoder_out"]).abs().max() < 1e-4, utt["wav"]
        streamed, lengths = model.encoder.forward_chunk_by_chunk(model.cmvn(feats), chunk, left)
        assert streamed.shape == utt["chunk_by_chunk_encoder_out"].shape, utt["wav"]
        assert (streamed - utt["chunk_by_chunk_encoder_out"]).abs().max() < 1e-4, utt["wav"]
        assert lengths.tolist() == [streamed.size(1)]


@torch.inference_mode()
def test_four_modes_on_the_chunk_masked_encoder_give_wenets_tokens(model, reference):
    chunk, left = reference["chunk"], reference["left"]
    for utt in reference["utts"]:
        feats = utt["feats"].unsqueeze(0)
        enc, lengths = model.encode(feats, torch.tensor([feats.size(1)]), chunk, left)
        assert_four_modes_match(model, enc, lengths, utt["decode_chunk"], reference["reverse_weight"], utt["wav"])
