"""The streaming recognizer with a transducer (WeNet's U2++ transducer with the stateless
predictor, tests/fixtures/wenet/transducer/rnnt_stateless_u2pp): audio fed in pieces gives,
at the end, WeNet's chunk-4 tokens of the mode (the predictor state carried from chunk to
chunk); a partial after every chunk; the joint's blank probabilities drive the endpoint."""
from __future__ import annotations

import pytest
import soundfile
import torch

from asrkit.decode import DecodingOptions
from asrkit.stream.recognizer import StreamingRecognizer
from tests.models.transducer.wenet_transducer import FIXTURES, load_reference, load_wenet_transducer

pytestmark = pytest.mark.usefixtures("one_thread")
WAVS = FIXTURES.parent / "wavs"  # (the same three wavs as the CTC/attention references)
MODES = ("rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring", "ctc_beam_td_attn_rescoring")


@pytest.fixture(scope="module")
def model():
    return load_wenet_transducer("rnnt_stateless_u2pp")


def audio(name: str) -> torch.Tensor:
    samples, rate = soundfile.read(WAVS / name, dtype="float32")
    assert rate == 16000
    return torch.from_numpy(samples)


def stream(model, samples, mode: str, piece: int = 1600, **kwargs):
    options = DecodingOptions(modes=(mode,), decoding_chunk_size=4, beam_size=4, ctc_weight=0.5, reverse_weight=0.3,
                              transducer_weight=0.5, attn_weight=0.5, search_ctc_weight=0.3,
                              search_transducer_weight=0.7)
    recognizer = StreamingRecognizer(model, options, num_mel_bins=80, **kwargs)
    results = []
    for start in range(0, samples.numel(), piece):
        results += recognizer.accept_waveform(samples[start:start + piece])
    return results + recognizer.finish()


@pytest.mark.parametrize("mode", MODES)
def test_final_result_is_wenets_chunk_4_result(model, mode):
    for utt in load_reference("rnnt_stateless_u2pp")["utts"]:
        results = stream(model, audio(utt["wav"]), mode, endpoint_rules=None)
        partials, final = results[:-1], results[-1]
        assert final.final and not any(r.final for r in partials)
        assert final.tokens == utt["decode_chunk"][mode]["tokens"], (utt["wav"], mode)
        assert len(partials) == -(-utt["chunk_encoder_out"].size(1) // 4)
        if mode in ("rnnt_greedy_search", "rnnt_beam_search"):  # the last partial is the search's best
            assert partials[-1].tokens == final.tokens


def test_an_endpoint_from_the_joints_blank_splits_two_utterances(model):
    first, second = audio("Mike-test-00002.wav"), audio("f5-test-00026.wav")
    alone = stream(model, first, "rnnt_greedy_search", endpoint_rules=None)[-1]
    results = stream(model, torch.cat([first, torch.zeros(16000 * 2), second]), "rnnt_greedy_search")
    finals = [r for r in results if r.final]
    end_of_first = first.numel() / 16000
    assert end_of_first <= finals[0].audio_s < end_of_first + 2.0, [(r.final, r.audio_s) for r in results]
    assert finals[0].tokens == alone.tokens and len(finals) >= 2
