"""The streaming recognizer on WeNet's own U2++ model (tests/fixtures/wenet/u2pp): audio fed
in pieces gives, at the end, the tokens WeNet's chunked attention rescoring gives (chunk 4,
all or two left chunks), partial results after every chunk, the same whatever the piece
size; and an endpoint splits two utterances joined by silence into two segments."""
from __future__ import annotations

import pytest
import soundfile
import torch

from asrkit.decode import DecodingOptionError, DecodingOptions
from asrkit.stream.recognizer import StreamingRecognizer
from tests.models.wenet_reference import FIXTURES, load_wenet_model

WAVS = FIXTURES / "wavs"


@pytest.fixture(scope="module")
def model():
    return load_wenet_model("u2pp")


def audio(name: str) -> torch.Tensor:
    samples, rate = soundfile.read(WAVS / name, dtype="float32")
    assert rate == 16000
    return torch.from_numpy(samples)


def stream(model, samples: torch.Tensor, piece: int, left: int, **kwargs):
    options = DecodingOptions(decoding_chunk_size=4, num_decoding_left_chunks=left, beam_size=4, ctc_weight=0.3,
                              reverse_weight=0.3)
    recognizer = StreamingRecognizer(model, options, **kwargs)
    results = []
    for start in range(0, samples.numel(), piece):
        results += recognizer.accept_waveform(samples[start:start + piece])
    results += recognizer.finish()
    return results


@pytest.mark.parametrize("reference, left", [("reference_chunk4.pt", -1), ("reference_chunk4_left2.pt", 2)])
def test_final_result_is_wenets_chunked_attention_rescoring(model, reference, left):
    ref = torch.load(FIXTURES / "u2pp" / reference, weights_only=True)
    for utt in ref["utts"]:
        results = stream(model, audio(utt["wav"]), piece=1600, left=left, endpoint_rules=None)
        partials, final = results[:-1], results[-1]
        assert final.final and not any(r.final for r in partials)
        assert final.tokens == utt["decode_chunk"]["attention_rescoring"]["tokens"], utt["wav"]
        # one partial per chunk of 4 encoder frames (the last one possibly shorter); the last
        # is the prefix beam search over every frame: WeNet's chunked ctc_prefix_beam_search
        assert len(partials) == -(-utt["chunk_encoder_out"].size(1) // 4)
        assert partials[-1].tokens == utt["decode_chunk"]["ctc_prefix_beam_search"]["tokens"], utt["wav"]


def test_piece_size_does_not_change_anything(model):
    samples = audio("Mike-test-00002.wav")
    a = stream(model, samples, piece=160, left=-1, endpoint_rules=None)
    b = stream(model, samples, piece=4000, left=-1, endpoint_rules=None)
    assert [(r.tokens, r.final, r.audio_s) for r in a] == [(r.tokens, r.final, r.audio_s) for r in b]


def test_an_endpoint_ends_the_first_utterance_in_the_silence_after_it(model):
    """Two utterances joined by 2 s of silence: the endpoint (1 s of blank after speech)
    finalises the first one inside the silence, with the result of that utterance alone,
    and the stream goes on into the second.  (The barely trained WeNet model may see
    "speech" when a segment starts in silence, so later segments are not counted.)"""
    first, second = audio("Mike-test-00002.wav"), audio("f5-test-00026.wav")
    alone = stream(model, first, piece=1600, left=-1, endpoint_rules=None)[-1]
    results = stream(model, torch.cat([first, torch.zeros(16000 * 2), second]), piece=1600, left=-1)
    finals = [r for r in results if r.final]
    end_of_first = first.numel() / 16000
    assert end_of_first + 0.5 <= finals[0].audio_s < end_of_first + 2.0, [(r.final, r.audio_s) for r in results]
    assert finals[0].tokens == alone.tokens
    assert len(finals) >= 2 and results[-1].final and results[-1].tokens


def test_streaming_needs_a_chunk_size(model):
    for full_context in (0, -1):
        with pytest.raises(DecodingOptionError, match="streaming needs decoding_chunk_size > 0"):
            StreamingRecognizer(model, DecodingOptions(decoding_chunk_size=full_context))


def test_centred_frames_stream_as_the_whole_utterance_decodes(model):
    """With kaldi-native-fbank's features (snip_edges false, high_freq −400) the stream's
    last frames come from :meth:`StreamingFbank.finish`; the final result is still the
    chunked attention rescoring of the whole-utterance features (odd pieces of 999 samples)."""
    from asrkit.data.features import compute_fbank
    from asrkit.decode import decode
    samples = audio("Mike-test-00002.wav")
    fbank = dict(snip_edges=False, high_freq=-400.0)
    feats = compute_fbank(samples.unsqueeze(0), 16000, num_mel_bins=80, frame_length=25, frame_shift=10, **fbank)
    options = DecodingOptions(modes=("attention_rescoring",), decoding_chunk_size=4, beam_size=4, ctc_weight=0.3,
                              reverse_weight=0.3)
    want = decode(model, feats.unsqueeze(0), torch.tensor([feats.size(0)]), options)["attention_rescoring"][0]
    final = stream(model, samples, piece=999, left=-1, endpoint_rules=None, **fbank)[-1]
    assert final.tokens == list(want)
    assert final.audio_s == pytest.approx(feats.size(0) * 0.01)
