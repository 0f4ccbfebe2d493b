"""WeNet's own models computed in asrkit: two tiny models trained by WeNet
(``tests/fixtures/wenet/{offline,u2pp}``, see ``/work/shared/wenet_reference/README.md``
for how they and ``reference*.pt`` were made) loaded from WeNet's ``train.yaml`` and
``epoch_5.pt`` as they are, fed WeNet's fbank features of three wavs, must give WeNet's
encoder output and CTC log-probabilities (1e-4, max abs) and WeNet's tokens and scores in
all four decoding modes (beam 4, ctc_weight 0.3, reverse_weight 0.3; no blank skip,
length or blank penalty, as WeNet's reference was made).

The U2++ model's ``encoder_out`` reference for two of the wavs is not full context:
WeNet's ``encoder(feats, lens)`` with its default ``decoding_chunk_size=0`` draws a random
chunk size for a dynamic-chunk model even in eval mode (``add_optional_chunk_mask``), and
it drew 7 and 11 (all left chunks) there; those two are compared with asrkit's masked
forward at the chunk size WeNet drew (``ENCODER_REF_CHUNK`` of ``wenet_reference.py``).  Its
decoding references are full context (``model.decode`` defaults to
``decoding_chunk_size=-1``) for all three.  The chunked references of the U2++ model are
tested in ``test_wenet_u2pp_reference.py``.
"""
from __future__ import annotations

import pytest
import torch

from tests.models.wenet_reference import ENCODER_REF_CHUNK, FIXTURES, assert_four_modes_match, load_wenet_model

REFERENCES = {"offline": "reference.pt", "u2pp": "reference_chunk4.pt"}


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def wenet(request):
    name = request.param
    reference = torch.load(FIXTURES / name / REFERENCES[name], weights_only=True)
    return name, load_wenet_model(name), reference


@torch.inference_mode()
def test_encoder_and_ctc_match_wenet(wenet):
    name, model, reference = wenet
    assert len(reference["utts"]) == len(ENCODER_REF_CHUNK[name])
    for utt, chunk in zip(reference["utts"], ENCODER_REF_CHUNK[name]):
        feats = utt["feats"].unsqueeze(0)
        enc, lengths = model.encode(feats, torch.tensor([feats.size(1)]), chunk, -1)
        assert enc.shape == utt["encoder_out"].shape, utt["wav"]
        assert (enc - utt["encoder_out"]).abs().max() < 1e-4, utt["wav"]
        ctc = model.ctc_log_probs(enc)
        assert (ctc - utt["ctc_logprobs"]).abs().max() < 1e-4, utt["wav"]


@torch.inference_mode()
def test_four_modes_give_wenets_tokens_and_scores(wenet):
    name, model, reference = wenet
    for utt in reference["utts"]:
        feats = utt["feats"].unsqueeze(0)
        enc, lengths = model.encode(feats, torch.tensor([feats.size(1)]))
        assert_four_modes_match(model, enc, lengths, utt["decode_full"], reference["reverse_weight"], utt["wav"])
