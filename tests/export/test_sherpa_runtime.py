"""The real sherpa-onnx runtime, through its public API only (``OfflineRecognizer`` /
``OnlineRecognizer.from_wenet_ctc``, :mod:`asrkit.export.sherpa`), on a real digits model
trained with the features sherpa-onnx computes (``fbank_conf`` ``snip_edges: false``,
``high_freq: -400``; ``tests/fixtures/asrkit_digits/u2pp_runtime``): on the utterances of
the tiny espeak-ng corpus its transcripts are asrkit's greedy CTC search -- offline: the
full-context forward, text exactly and token times to the encoder frame (sherpa-onnx 2.0.1
dithers its fbank, docs/export.md); streaming: the chunked forward over the frames
sherpa-onnx decodes, fed as its examples feed audio --, int8 within a point of fp32; a
model whose features are not the runtime's is refused with one line saying what to set."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import soundfile as sf
import torch

from asrkit.config import load_config
from asrkit.data.features import compute_fbank, fbank_options
from asrkit.trained_model import build_trained_model
from asrkit.export.onnx import FBANK_DEFAULTS, OFFLINE_FILE, STREAMING_FILE, eager_stream_reference, export_onnx, int8_name
from asrkit.export.sherpa import (TAIL_PADDING_S, FeatureMismatchError, FeatureMismatchWarning, decode_offline,
                                  decode_streaming, offline_recognizer, online_recognizer,
                                  runtime_feature_mismatch)
from asrkit.config_files import load_text_inputs
from asrkit.metrics import score
from tests.helpers import REPO

MODEL = REPO / "tests" / "fixtures" / "asrkit_digits" / "u2pp_runtime"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trained():
    """``(model, units, fbank_conf)`` of the fixture model."""
    cfg = load_config(MODEL / "train.yaml", [f"cmvn_conf.cmvn_file={MODEL / 'global_cmvn'}",
                                             f"tokenizer_conf.symbol_table_path={MODEL / 'units.txt'}"])
    tokenizer = load_text_inputs(cfg, model_cmvn=False)
    model = build_trained_model(cfg, MODEL / "avg_3.pt", tokenizer.vocabulary, "cpu")
    return model, list(tokenizer.symbols), cfg.dataset_conf.fbank_conf


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    model, units, fb = trained
    out = tmp_path_factory.mktemp("u2pp_runtime_onnx")
    options = fbank_options(fb)
    summary = export_onnx(model, units, out, sample_rate=16000, streaming=True, verify=False,
                          **{k: v for k, v in options.items() if k != "num_mel_bins"}, num_mel_bins=fb.num_mel_bins)
    assert summary["runtime_features"] is None
    return out


@pytest.fixture(scope="module")
def utterances(tiny_corpus):
    """``(key, samples, text)`` of all 72 utterances of the tiny corpus."""
    found = []
    for split in ("train", "dev", "test"):
        for line in tiny_corpus.splits[split].data_list.read_text().splitlines():
            entry = json.loads(line)
            samples, rate = sf.read(entry["wav"], dtype="float32")
            assert rate == 16000
            found.append((entry["key"], samples, entry["txt"]))
    return found


MAX_DITHER_FLIPS = 2  # transcripts sherpa-onnx's dither may flip per run (of 72 / 36)

def greedy(log_probs: torch.Tensor, units: list[str]) -> tuple[str, list[int]]:
    """Greedy CTC text and each token's first frame."""
    ids = log_probs.reshape(-1, log_probs.size(-1)).argmax(-1).tolist()
    tokens, frames = [], []
    for t, (prev, i) in enumerate(zip([0] + ids, ids)):
        if i != 0 and i != prev:
            tokens.append(i)
            frames.append(t)
    return "".join(units[i] for i in tokens).replace("\u2581", " ").strip(), frames


def features(samples: np.ndarray, fb) -> torch.Tensor:
    return compute_fbank(torch.from_numpy(samples).unsqueeze(0), 16000, **fbank_options(fb))


def test_offline_transcripts_and_times_are_asrkits_greedy_search(trained, exported, utterances):
    model, units, fb = trained
    assert (fb.snip_edges, fb.high_freq, fb.sample_scale) == (False, -400.0, 32768.0)  # trained on them
    fp32, int8 = offline_recognizer(exported), offline_recognizer(exported, model=int8_name(exported / OFFLINE_FILE).name)
    refs, texts, int8_texts, differ = {}, {}, {}, []
    for key, samples, ref in utterances:
        feats = features(samples, fb)
        with torch.no_grad():
            out, _ = model.encoder(model.cmvn(feats.unsqueeze(0)), torch.tensor([feats.size(0)]))
            want, frames = greedy(model.ctc(out), units)
        got = decode_offline(fp32, samples, 16000)
        got_frames = [round(t / 0.04) for t in got.timestamps]
        if got.text.strip() != want:
            differ.append(key)
        else:  # (a token's frame may move by one where two frames nearly tie)
            assert len(got_frames) == len(frames), key
            assert all(abs(a - b) <= 1 for a, b in zip(got_frames, frames)), (key, got_frames, frames)
        refs[key], texts[key] = ref, want
        int8_texts[key] = decode_offline(int8, samples, 16000).text.strip()
    # sherpa-onnx dithers every call (docs/export.md): a near-tie can flip in one utterance of
    # a run (seen: 1 of 72 in one run of three); the rest is asrkit's greedy search exactly
    assert len(differ) <= MAX_DITHER_FLIPS, differ
    cer = 100 * score(refs, texts, mode="char")[0].rate
    assert cer < 5.0  # (a trained model: the transcripts compared are real ones)
    assert 100 * score(refs, int8_texts, mode="char")[0].rate <= cer + 1.0


@pytest.mark.parametrize("chunk, left", [(16, 4), (8, 2)])
def test_streaming_transcripts_are_asrkits_chunked_greedy_search(trained, exported, utterances, chunk, left):
    """Fed in 100 ms pieces, then 0.66 s of silence (sherpa-onnx's examples): the text is the
    greedy search of asrkit's chunked forward over the frames sherpa-onnx decodes -- the
    windows of ``(chunk − 1)·4 + 7`` frames, ``chunk·4`` apart, that fit in the padded audio's
    features (round(T / 160) centred frames, the last ones reflected at the end)."""
    model, units, fb = trained
    recognizer = online_recognizer(exported, chunk_size=chunk, num_left_chunks=left)
    rate, context = model.encoder.subsampling_rate, model.encoder.embed.right_context
    window, shift = (chunk - 1) * rate + context + 1, chunk * rate
    differ = []
    for key, samples, _ in utterances[::2]:
        padded = np.concatenate([samples, np.zeros(int(TAIL_PADDING_S * 16000), np.float32)])
        feats = features(padded, fb)
        windows = max(0, -(-(feats.size(0) - window) // shift))  # while processed + window < frames
        want, _ = greedy(eager_stream_reference(model, feats, model.cmvn, chunk, left, windows * chunk), units)
        if decode_streaming(recognizer, samples, 16000).strip() != want:
            differ.append(key)
    assert len(differ) <= MAX_DITHER_FLIPS, differ  # (sherpa-onnx's dither: see the offline test)


def test_a_model_on_other_features_is_refused_with_one_line(trained, tmp_path):
    model, units, _ = trained
    export_onnx(model, units, tmp_path, num_mel_bins=80, streaming=True, int8=False, verify=False)  # WeNet's fbank
    for build in (offline_recognizer, online_recognizer):
        with pytest.raises(FeatureMismatchError) as refused:
            build(tmp_path)
        message = str(refused.value)
        assert "\n" not in message and "snip_edges true (sherpa-onnx: false)" in message
        assert "Train with dataset_conf.fbank_conf snip_edges: false, high_freq: -400" in message
        with pytest.warns(FeatureMismatchWarning, match="snip_edges true"):
            assert build(tmp_path, allow_feature_mismatch=True) is not None  # (to measure the mismatch)


def test_what_the_runtime_computes_for_each_kind_of_model():
    ctc = dict(FBANK_DEFAULTS, snip_edges=False, high_freq=-400.0)
    assert runtime_feature_mismatch(ctc) is None
    assert runtime_feature_mismatch(dict(ctc, high_freq=7600.0)) is None  # (the same top edge at 16 kHz)
    assert runtime_feature_mismatch(dict(ctc, sample_rate=8000, high_freq=3600.0)) is None
    assert "sample_scale 32768 (sherpa-onnx: 1)" in runtime_feature_mismatch(ctc, "transducer")
    assert runtime_feature_mismatch(dict(ctc, sample_scale=1.0), "transducer") is None
    assert "frame_shift: 10" in runtime_feature_mismatch(dict(ctc, frame_shift_ms=12.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "high_freq 0 (sherpa-onnx: -400)" in runtime_feature_mismatch(dict(ctc, high_freq=0.0))


def test_the_metadata_records_the_features(exported):
    from asrkit.export.sherpa import read_metadata
    for name in (OFFLINE_FILE, STREAMING_FILE, int8_name(exported / STREAMING_FILE).name):
        meta = read_metadata(exported / name)
        assert (meta["asrkit_snip_edges"], meta["asrkit_high_freq"], meta["asrkit_sample_scale"]) == (
            "false", "-400", "32768"), name
        assert meta["asrkit_fbank"].startswith("kaldi povey window, snip_edges false, mel bins from 20 Hz to "
                                               "Nyquist - 400 Hz")
