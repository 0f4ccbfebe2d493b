"""The transcriber's front ends (:mod:`asrkit.transcribe.front_end`): a ``model: whisper``
experiment is transcribed from Whisper's log-mel of each part (the training pipeline's
features, not Kaldi fbank), over a long recording cut at its pauses, each part decoded as
:func:`asrkit.decode.decode` decodes those features; its shortest input and frame counts are
the log-mel's; it refuses to stream in one line; Kaldi fbank's counts are the data pipeline's."""
from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf
import torch

from asrkit.checkpoint.whisper import convert_openai_file
from asrkit.data.features import compute_fbank
from asrkit.data.whisper_features import log_mel_spectrogram
from asrkit.decode import DecodingOptionError, DecodingOptions, decode
from asrkit.transcribe import AudioError, Segmentation, load_model
from asrkit.transcribe.front_end import KaldiFbank, WhisperLogMel

from tests.models.whisper.openai_files import random_openai_file

pytest.importorskip("whisper")
pytestmark = pytest.mark.usefixtures("one_thread")  # (a busy machine slows a 2-thread search 10x)

WAVS = Path(__file__).resolve().parents[1] / "fixtures" / "wenet" / "wavs"


@pytest.fixture(scope="module")
def whisper_experiment(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper_transcribe")
    convert_openai_file(random_openai_file(folder / "tiny-random.pt", seed=4), folder / "exp")
    (folder / "exp" / "whisper.pt").rename(folder / "exp" / "final.pt")
    model = load_model(folder / "exp")
    with torch.no_grad():  # (random weights never end a hypothesis: eot made likely, or each search runs
        decoder = model.backend.model.decoder  # to its length limit over 51,865 tokens per step)
        decoder.output_layer.bias[model.backend.model.eos] = 4.0
    return model


def test_whisper_parts_are_decoded_from_their_log_mel(whisper_experiment):
    model = whisper_experiment
    assert model.backend.front_end == WhisperLogMel(80, 400, 160, 0, 16000)
    pieces = [torch.from_numpy(sf.read(WAVS / f"{key}.wav", dtype="float32")[0])
              for key in ("f5-test-00026", "grandma-test-00125")]
    audio = torch.cat([pieces[0], torch.zeros(16000), pieces[1]])        # two words, 1 s apart
    result = model.transcribe(audio, 16000, mode="attention_rescoring", beam_size=3)
    assert len(result.segments) == 2
    got = []
    for start, end in result.segments:
        part = audio[round(start * 16000):round(end * 16000)]
        feats = log_mel_spectrogram(part, 80)
        assert torch.equal(model.features(part), feats)
        with torch.no_grad():
            ids = decode(model.backend.model, feats.unsqueeze(0), torch.tensor([feats.size(0)]),
                         DecodingOptions(modes=("attention_rescoring",), beam_size=3))["attention_rescoring"][0]
        got.append(model.backend.text(ids))
    assert result.text == " ".join(t for t in got if t)
    whole = model.transcribe(audio, 16000, mode="attention", beam_size=1, segmentation=Segmentation.whole())
    assert len(whole.segments) == 1


def test_whisper_shortest_input_and_no_streaming(whisper_experiment):
    model = whisper_experiment
    front = model.backend.front_end
    shortest = front.min_samples(model.backend.min_input_length)
    assert front.frames(shortest) >= model.backend.min_input_length > front.frames(shortest - 1)
    model.transcribe(torch.full((shortest,), 0.1), 16000, segmentation=Segmentation.whole())
    with pytest.raises(AudioError, match="too short"):
        model.transcribe(torch.full((shortest - 1,), 0.1), 16000, segmentation=Segmentation.whole())
    with pytest.raises(DecodingOptionError, match="does not stream"):
        model.backend.fbank_options()


@pytest.mark.parametrize("snip_edges", [True, False])
def test_kaldi_fbank_counts_are_the_pipelines(snip_edges):
    front = KaldiFbank(16000, 80, 25.0, 10.0, snip_edges, 0.0, 32768.0)
    for n in (400, 401, 559, 560, 16123):
        wav = 0.01 * torch.randn(n, generator=torch.Generator().manual_seed(n))
        want = compute_fbank(wav.unsqueeze(0), 16000, num_mel_bins=80, frame_length=25.0, frame_shift=10.0,
                             dither=0.0, snip_edges=snip_edges, high_freq=0.0, sample_scale=32768.0)
        assert front.frames(n) == want.size(0)
        torch.testing.assert_close(front.features(wav), want)
    for frames in (1, 7, 50):
        assert front.frames(front.min_samples(frames)) >= frames > front.frames(front.min_samples(frames) - 1)


def test_the_server_decodes_whisper_segments_whole(whisper_experiment):
    """``asrkit serve`` takes the model as a full-context one (endpointed segments decoded
    whole) and an uploaded file gets the transcriber's result."""
    from asrkit.serve.model import ServedModel, ServeSettings

    served = ServedModel(whisper_experiment, ServeSettings(mode="ctc_greedy_search"))
    assert served.kind == "segments"
    wav = (WAVS / "f5-test-00026.wav").read_bytes()
    got = served.transcribe_bytes(wav, "f5.wav")
    want = whisper_experiment.transcribe_with_options(WAVS / "f5-test-00026.wav", served.file_options)
    assert got["text"] == want.text and got["path"] == "f5.wav"
