"""WeNet's own tiny trained models of the four other encoders (Branchformer,
E-Branchformer, Squeezeformer, Efficient Conformer), each trained by WeNet's ``train.py`` on
the digits data (``tests/fixtures/wenet/trained/<encoder>``; README.md there says how they and
``reference.pt`` were made, with which WeNet commit), loaded by asrkit from WeNet's
``train.yaml`` and checkpoint as they are and fed WeNet's fbank features of three wavs: the
encoder output (1e-4, max abs) and WeNet's tokens and scores (1e-4) in all four decoding modes
(beam 4, ctc_weight 0.3; no blank skip, length or blank penalty), with full context and, for
these streaming (causal, dynamic-chunk) models, chunk-masked as WeNet's ``decode`` with
``decoding_chunk_size`` 4 and all or two ``num_decoding_left_chunks``."""
from __future__ import annotations

import pytest
import torch

from tests.models.wenet_reference import FIXTURES, assert_four_modes_match, load_wenet_folder

ENCODERS = ("branchformer", "e_branchformer", "squeezeformer", "efficient_conformer")


@pytest.fixture(scope="module", params=ENCODERS)
def trained(request):
    folder = FIXTURES / "trained" / request.param
    reference = torch.load(folder / "reference.pt", weights_only=True)
    return load_wenet_folder(folder, checkpoint=reference["checkpoint"]), reference


@torch.inference_mode()
def test_encoder_and_four_modes_match_wenet_full_and_chunked(trained):
    model, reference = trained
    runs = [(run["chunk"], run["left"]) for run in reference["utts"][0]["runs"]]
    assert runs[0] == (-1, -1) and (len(runs) > 1) == bool(reference["config"].get("use_dynamic_chunk"))
    for utt in reference["utts"]:
        feats = utt["feats"].unsqueeze(0)
        for run in utt["runs"]:
            where = f"{utt['wav']} chunk {run['chunk']} left {run['left']}"
            enc, lengths = model.encode(feats, torch.tensor([feats.size(1)]), max(run["chunk"], 0), run["left"])
            assert enc.shape == run["encoder_out"].shape, where
            assert (enc - run["encoder_out"]).abs().max() < 1e-4, where
            assert_four_modes_match(model, enc, lengths, run["decode"], reference["reverse_weight"], where, tol=1e-4)
