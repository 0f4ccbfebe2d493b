"""Transcription with kaldi-native-fbank's features (``fbank_conf.snip_edges: false``,
``high_freq: -400``): the experiment directory computes those frames (centred,
round(T / shift) of them, the last ones from :meth:`StreamingFbank.finish`), an exported
``final.zip`` records them in its ``meta.json`` and transcribes alike (so does
``tools/decode_exported.py``), and the shortest
input follows the centred frame count."""
from __future__ import annotations

import json
import os

import pytest
import soundfile as sf
import torch

from asrkit.data.features import compute_fbank
from asrkit.export.archive import EXTRA_META
from asrkit.transcribe import AudioError, Segmentation, load_model
from tests.helpers import run_tool
from tests.models.wenet_reference import FIXTURES

RUNTIME = ["dataset_conf.fbank_conf.snip_edges=false", "dataset_conf.fbank_conf.high_freq=-400"]
MIKE = FIXTURES / "wavs" / "Mike-test-00002.wav"


@pytest.fixture(scope="module")
def centred():
    return load_model(FIXTURES / "u2pp", overrides=RUNTIME)


def test_features_are_the_centred_whole_utterance_fbank(centred):
    samples, rate = sf.read(MIKE, dtype="float32")
    wav = torch.from_numpy(samples)
    want = compute_fbank(wav.unsqueeze(0), rate, num_mel_bins=80, frame_length=25, frame_shift=10,
                         snip_edges=False, high_freq=-400.0)
    got = centred.features(wav)  # (the U2++ experiment applies CMVN in the model: raw fbank here)
    assert got.shape == want.shape == (round(wav.numel() / 160), 80)
    assert (got - want).abs().max() < 1e-5


def test_the_archive_records_the_options_and_transcribes_alike(centred, tmp_path):
    from asrkit.bin import export
    out = tmp_path / "final.zip"
    cwd = os.getcwd()
    os.chdir(FIXTURES / "u2pp")  # (WeNet's saved paths are relative to its experiment)
    try:
        args = ["--config", "train.yaml", "--checkpoint", "epoch_5.pt", "--output", str(out)]
        assert export.main(args + [a for o in RUNTIME for a in ("--override", o)]) == 0
    finally:
        os.chdir(cwd)
    from asrkit.export.archive import load_exported
    meta = json.loads(load_exported(out)[1][EXTRA_META])
    assert (meta["snip_edges"], meta["high_freq"], meta["sample_scale"]) == (False, -400.0, 32768.0)
    archive = load_model(out)
    assert (archive.backend.front_end.snip_edges, archive.backend.front_end.high_freq) == (False, -400.0)
    for mode in ("ctc_greedy_search", "attention_rescoring"):
        want = centred.transcribe(MIKE, mode=mode, segmentation=Segmentation.whole())
        assert archive.transcribe(MIKE, mode=mode, segmentation=Segmentation.whole()).tokens == want.tokens
    # tools/decode_exported.py (torch and torchaudio only) reads them from meta.json too
    printed = run_tool("decode_exported.py", "--model", out, "--mode", "ctc_greedy_search", MIKE).stdout
    want = centred.transcribe(MIKE, mode="ctc_greedy_search", segmentation=Segmentation.whole()).text
    assert printed.splitlines()[0] == f"{MIKE.stem} {want}"


def test_the_shortest_input_follows_the_centred_frame_count(centred):
    need = centred.backend.min_input_length * 160 - 80  # (T + 80) // 160 frames
    noise = torch.randn(need) * 0.05
    assert centred.transcribe(noise, 16000, mode="ctc_greedy_search", segmentation=Segmentation.whole()) is not None
    with pytest.raises(AudioError, match="too short"):
        centred.transcribe(noise[:-1], 16000, mode="ctc_greedy_search", segmentation=Segmentation.whole())
