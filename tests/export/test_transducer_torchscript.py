"""A transducer in the TorchScript archive (``final.zip``): WeNet's U2++ transducer exported
with its searches compiled from ``asrkit.decode.transducer_search`` (one implementation)
gives eager decoding's tokens in every mode it holds, WeNet's among them; ``asrkit
transcribe`` runs the archive; the RNN-T rescoring modes, which need torchaudio's loss, are
not in it and are refused by name."""
from __future__ import annotations

import pytest
import torch

from asrkit.decode import DecodingOptions, decode
from asrkit.export.archive import export_model
from asrkit.transcribe import Segmentation, load_model
from tests.models.transducer.wenet_transducer import FIXTURES, load_reference, load_wenet_transducer

pytestmark = pytest.mark.usefixtures("one_thread")
TRANSDUCER_MODES = ["rnnt_greedy_search", "rnnt_beam_search", "modified_beam_search"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = load_wenet_transducer("rnnt_stateless_u2pp")
    units = [line.split()[0] for line in (FIXTURES / "rnnt_stateless_u2pp" / "units.txt").read_text().splitlines()]
    path = tmp_path_factory.mktemp("archive") / "final.zip"
    summary = export_model(model, units, path, sample_rate=16000, num_mel_bins=80, frame_length=25.0,
                           frame_shift=10.0, config_text=(FIXTURES / "rnnt_stateless_u2pp" / "train.yaml").read_text())
    return model, path, summary


def test_the_archive_decodes_as_eager_decoding_and_as_wenet(exported):
    model, path, summary = exported
    assert set(TRANSDUCER_MODES) <= set(summary["modes"])  # (export_model checked them against eager)
    loaded = torch.jit.load(str(path))
    assert "rnnt_beam_attn_rescoring" not in loaded.supported_modes()
    modes = [*TRANSDUCER_MODES, "ctc_greedy_search", "attention_rescoring"]
    for utt in load_reference("rnnt_stateless_u2pp")["utts"]:
        feats = utt["feats"].unsqueeze(0)
        lengths = torch.tensor([feats.size(1)])
        got = loaded.decode(feats, lengths, beam_size=4, modes=modes)
        assert got == decode(model, feats, lengths, DecodingOptions(modes=tuple(modes), beam_size=4))
        assert got["rnnt_greedy_search"][0] == utt["decode_full"]["rnnt_greedy_search"]["tokens"]
        assert got["rnnt_beam_search"][0] == utt["decode_full"]["rnnt_beam_search"]["tokens"]
    with pytest.raises(torch.jit.Error, match="unknown decoding mode .rnnt_beam_attn_rescoring."):
        loaded.decode(feats, lengths, modes=["rnnt_beam_attn_rescoring"])


def test_transcribe_runs_the_archive_with_token_times(exported):
    _, path, _ = exported
    utt = load_reference("rnnt_stateless_u2pp")["utts"][0]
    from_archive = load_model(path).transcribe(FIXTURES.parent / "wavs" / utt["wav"], mode="rnnt_greedy_search",
                                               segmentation=Segmentation.whole())
    eager = load_model(FIXTURES / "rnnt_stateless_u2pp").transcribe(
        FIXTURES.parent / "wavs" / utt["wav"], mode="rnnt_greedy_search", segmentation=Segmentation.whole())
    assert from_archive.tokens == eager.tokens and from_archive.token_times == eager.token_times
