"""Streaming from Python through the one loader: ``asrkit.load_model(...).stream(options)``
gives WeNet's own U2++ model's chunked result (tests/fixtures/wenet/u2pp, as
tests/stream/test_recognizer.py checks the recognizer itself), and refuses what cannot stream."""
from __future__ import annotations

import pytest
import soundfile
import torch

import asrkit
from asrkit.decode import DecodingOptionError, DecodingOptions
from tests.models.wenet_reference import FIXTURES


@pytest.fixture(scope="module")
def transcriber():
    return asrkit.load_model(FIXTURES / "u2pp", checkpoint="epoch_5.pt")


def test_a_stream_from_the_loaded_model_gives_wenets_chunked_result(transcriber):
    ref = torch.load(FIXTURES / "u2pp" / "reference_chunk4.pt", weights_only=True)
    utt = ref["utts"][0]
    samples, rate = soundfile.read(FIXTURES / "wavs" / utt["wav"], dtype="float32")
    assert rate == transcriber.sample_rate
    options = DecodingOptions(decoding_chunk_size=4, beam_size=4, ctc_weight=0.3, reverse_weight=0.3)
    stream = transcriber.stream(options)
    results = []
    for start in range(0, len(samples), 1600):
        results += stream.accept_waveform(torch.from_numpy(samples[start:start + 1600]))
    results += stream.finish()
    assert results[-1].final
    finals = [r for r in results if r.final]
    assert finals[-1].tokens == utt["decode_chunk"]["attention_rescoring"]["tokens"]


def test_options_without_chunks_are_refused_in_one_line(transcriber):
    with pytest.raises(DecodingOptionError, match="decoding_chunk_size"):
        transcriber.stream(DecodingOptions())
