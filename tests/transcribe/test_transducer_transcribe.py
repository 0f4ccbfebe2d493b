"""``load_model(...).transcribe`` with WeNet's U2++ transducer (its fixture folder is a WeNet
experiment: train.yaml, epoch_5.pt): every transducer mode gives the tokens ``recognize``'s
decoding gives, with token times from the frames the search emitted each token at."""
from __future__ import annotations

import pytest

from asrkit.transcribe import Segmentation, load_model
from tests.models.transducer.wenet_transducer import FIXTURES, load_reference

pytestmark = pytest.mark.usefixtures("one_thread")
TIMED = ("rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring")


@pytest.mark.parametrize("mode", [*TIMED, "ctc_beam_td_attn_rescoring"])
def test_transducer_modes_transcribe_with_token_times(mode):
    model = load_model(FIXTURES / "rnnt_stateless_u2pp")
    utt = load_reference("rnnt_stateless_u2pp")["utts"][0]
    got = model.transcribe(FIXTURES.parent / "wavs" / utt["wav"], mode=mode, beam_size=4, ctc_weight=0.5, reverse_weight=0.3,
                           segmentation=Segmentation.whole())
    ids = utt["decode_full"][mode]["tokens"]
    assert got.tokens == [model.backend.units[i] for i in ids]
    frame_s = 0.04  # 4x subsampling of 10 ms frames
    starts = [t.start for t in got.token_times]
    assert starts == sorted(starts) and 0 <= starts[0] and starts[-1] < got.duration
    if mode in TIMED:  # one encoder frame per token, where the search emitted it
        assert all(t.end - t.start == pytest.approx(frame_s) for t in got.token_times)
        assert got.words is not None and len(got.words) == len(got.text.split())
