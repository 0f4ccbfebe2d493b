"""ONNX export for sherpa-onnx (asrkit.export.onnx): onnxruntime, fed by position exactly
as sherpa-onnx feeds the models (zero-padded caches, ``offset`` starting at ``R``, its
mask), equals eager asrkit on asrkit's fbank of real speech, offline and streaming, for
every positional encoding; WeNet's own checkpoints exported by asrkit reproduce WeNet's
``ctc_logprobs``; the real sherpa-onnx runtime, through its public API, loads the files
and decodes the wavs as asrkit's greedy CTC search does on the features sherpa-onnx
computes (the WeNet checkpoints exported with ``fbank_conf`` ``snip_edges`` false and
``high_freq`` −400 declared: the identity of the two runtimes does not depend on what a
model was trained on; tests/export/test_sherpa_runtime.py has a model trained on them)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asrkit.data.features import compute_fbank
from asrkit.export.onnx import (OFFLINE_FILE, STREAMING_FILE, eager_stream_reference, export_onnx, int8_name,
                                ort_session, session_runner, stream_log_probs)
from asrkit.export.sherpa import (decode_offline, decode_streaming, offline_recognizer, online_recognizer,
                                  read_metadata, TAIL_PADDING_S)
from tests.models.tiny import tiny_model
from tests.models.wenet_reference import ENCODER_REF_CHUNK, FIXTURES, load_wenet_model

WAVS = sorted((FIXTURES / "wavs").glob("*.wav"))
TOLERANCE = 1e-4
STREAM_SETTINGS = [(16, 4), (4, 2), (8, 1)]


RUNTIME = dict(snip_edges=False, high_freq=-400.0)  # what sherpa-onnx computes (fbank_conf keys)


def fbank(samples: np.ndarray, rate: int, bins: int = 80, **options) -> torch.Tensor:
    return compute_fbank(torch.from_numpy(samples).unsqueeze(0), rate, num_mel_bins=bins, frame_length=25,
                         frame_shift=10, **options)


@pytest.fixture(scope="module")
def speech_feats() -> list[torch.Tensor]:
    """asrkit's fbank of the three fixture wavs (real speech, 16 kHz) and of the three
    joined (long enough for a cache of 4 chunks of 16 frames to fill and slide)."""
    audio = [sf.read(w, dtype="float32")[0] for w in WAVS]
    return [fbank(a, 16000) for a in audio] + [fbank(np.concatenate(audio + audio), 16000)]


def toy_streaming_model(pos: str, encoder: str = "conformer"):
    """A random dynamic-chunk model (causal convolution, kernel 5) with the positional
    encoding ``pos``; its CTC head biased so that greedy search emits some tokens."""
    conf = {"pos_enc_layer_type": pos, "use_dynamic_chunk": True, "causal": True,
            "cnn_module_norm": "layer_norm"}
    if pos == "abs_pos":
        conf["selfattention_layer_type"] = "selfattn"
    model = tiny_model(80, 12, encoder=encoder, encoder_conf=conf).eval()
    with torch.no_grad():
        model.ctc.ctc_lo.bias[0] += 1.0
    return model


def feature_cmvn(feats: list[torch.Tensor]):
    frames = torch.cat(feats)
    return frames.mean(0), 1.0 / frames.std(0)


def eager_log_probs(model, feats: torch.Tensor, normalize) -> torch.Tensor:
    with torch.no_grad():
        out, _ = model.encoder(normalize(feats.unsqueeze(0)), torch.tensor([feats.size(0)]))
        return model.ctc(out)


CASES = {"rel_pos_xl": ("rel_pos_xl", "conformer"), "rel_pos": ("rel_pos", "conformer"),
         "abs_pos_transformer": ("abs_pos", "transformer")}


@pytest.fixture(scope="module", params=sorted(CASES))
def toy_export(request, tmp_path_factory, speech_feats):
    """Each toy model exported (offline + streaming, no int8, no built-in check), with a
    data-pipeline CMVN put inside."""
    model = toy_streaming_model(*CASES[request.param])
    cmvn = feature_cmvn(speech_feats)
    out = tmp_path_factory.mktemp(request.param)
    export_onnx(model, [f"u{i}" for i in range(12)], out, num_mel_bins=80, feature_cmvn=cmvn, streaming=True,
                int8=False, verify=False)
    return model, out, lambda x: (x - cmvn[0]) * cmvn[1]


def test_offline_model_equals_eager_on_real_speech(toy_export, speech_feats):
    model, out, normalize = toy_export
    run = session_runner(ort_session(out / OFFLINE_FILE))
    for feats in speech_feats:  # one utterance per call, as sherpa-onnx runs WeNet CTC models
        log_probs, lengths = run(feats.unsqueeze(0), torch.tensor([feats.size(0)]))
        want = eager_log_probs(model, feats, normalize)
        assert lengths.tolist() == [want.size(1)] and log_probs.shape == tuple(want.shape)
        assert np.abs(log_probs - want.numpy()).max() < TOLERANCE
    padded = torch.nn.utils.rnn.pad_sequence(speech_feats, batch_first=True)  # and a padded batch
    log_probs, lengths = run(padded, torch.tensor([f.size(0) for f in speech_feats]))
    for b, feats in enumerate(speech_feats):
        want = eager_log_probs(model, feats, normalize)[0]
        assert np.abs(log_probs[b, :lengths[b]] - want.numpy()).max() < TOLERANCE


@pytest.mark.parametrize("chunk,left", STREAM_SETTINGS)
def test_streaming_model_driven_as_sherpa_equals_eager_chunked_forward(toy_export, speech_feats, chunk, left):
    model, out, normalize = toy_export
    meta = read_metadata(out / STREAMING_FILE)
    run = session_runner(ort_session(out / STREAMING_FILE))
    for feats in speech_feats:
        got = stream_log_probs(run, feats, meta, chunk, left)
        assert got.size(1) >= chunk
        if feats is speech_feats[-1]:
            assert got.size(1) > (left + 1) * chunk  # the cache filled and slid
        want = eager_stream_reference(model, feats, normalize, chunk, left, got.size(1))
        assert got.shape == want.shape and (got - want).abs().max() < TOLERANCE


def test_streaming_caches_keep_exactly_r_frames_and_the_layout_sherpa_reads(toy_export):
    model, out, _ = toy_export
    import onnxruntime as ort
    session = ort.InferenceSession(str(out / STREAMING_FILE))
    assert [i.name for i in session.get_inputs()] == ["x", "offset", "required_cache_size", "attn_cache",
                                                      "conv_cache", "attn_mask"]
    assert [o.name for o in session.get_outputs()] == ["log_probs", "next_att_cache", "next_conv_cache"]
    meta = read_metadata(out / STREAMING_FILE)
    for key in ("head", "num_blocks", "output_size", "cnn_module_kernel", "right_context", "subsampling_factor",
                "vocab_size"):
        assert int(meta[key]) > 0, key
    kernel = int(meta["cnn_module_kernel"])
    assert meta["model_type"] == "wenet_ctc" and kernel == (5 if model.encoder.encoders[0].__class__.__name__
                                                            .startswith("Conformer") else 1)
    heads, blocks, d = int(meta["head"]), int(meta["num_blocks"]), int(meta["output_size"])
    for chunk, left in ((16, 4), (5, 3)):
        r = chunk * left
        x = torch.randn(1, (chunk - 1) * 4 + 7, 80) * 3 + 10
        mask = torch.ones(1, 1, r + chunk, dtype=torch.bool)
        mask[..., :r] = False
        outs = session_runner(session)(x, torch.tensor([r]), torch.tensor([r]), torch.zeros(blocks, heads, r, 2 * d // heads),
                                       torch.zeros(blocks, 1, d, kernel - 1), mask)
        assert outs[0].shape == (1, chunk, 12) and outs[1].shape == (blocks, heads, r, 2 * d // heads)
        assert outs[2].shape == (blocks, 1, d, kernel - 1)  # (passed through without a convolution)


# ----------------------------------------------------------------------------- WeNet's checkpoints


@pytest.fixture(scope="module")
def wenet_exports(tmp_path_factory) -> dict:
    """Both WeNet reference checkpoints exported by asrkit (the U2++ one also streaming),
    declared as trained on sherpa-onnx's features."""
    exports = {}
    for name in ("offline", "u2pp"):
        model = load_wenet_model(name)
        units = [line.split()[0] for line in (FIXTURES / name / "units.txt").read_text().splitlines()]
        out = tmp_path_factory.mktemp(f"wenet_{name}")
        summary = export_onnx(model, units, out, num_mel_bins=80, streaming=name == "u2pp", **RUNTIME)
        assert summary["runtime_features"] is None
        exports[name] = (model, out, summary)
    return exports


@pytest.mark.parametrize("name", ["offline", "u2pp"])
def test_exported_wenet_checkpoints_reproduce_wenets_ctc_logprobs(wenet_exports, name):
    _, out, summary = wenet_exports[name]
    assert all(diff < TOLERANCE for diff in summary["max_abs_diff"].values())  # the export's own check ran
    reference = torch.load(FIXTURES / name / ("reference.pt" if name == "offline" else "reference_chunk4.pt"),
                           weights_only=True)
    run = session_runner(ort_session(out / OFFLINE_FILE))
    compared = 0
    for utt, chunk in zip(reference["utts"], ENCODER_REF_CHUNK[name]):
        if chunk:  # WeNet drew a random chunk for this full-context reference (see wenet_reference)
            continue
        log_probs, _ = run(utt["feats"].unsqueeze(0), torch.tensor([utt["feats"].size(0)]))
        assert log_probs.shape == tuple(utt["ctc_logprobs"].shape)
        assert np.abs(log_probs - utt["ctc_logprobs"].numpy()).max() < TOLERANCE, utt["wav"]
        compared += 1
    assert compared >= 1


def test_exported_wenet_u2pp_streams_wenets_chunk_by_chunk_output(wenet_exports):
    """WeNet's ``forward_chunk_by_chunk`` (chunk 4, two left chunks) through its CTC head,
    against asrkit's streaming ONNX driven as sherpa-onnx drives it (R = 8, offset from 8)."""
    model, out, _ = wenet_exports["u2pp"]
    reference = torch.load(FIXTURES / "u2pp" / "reference_chunk4_left2.pt", weights_only=True)
    assert (reference["chunk"], reference["left"]) == (4, 2)
    meta = read_metadata(out / STREAMING_FILE)
    run = session_runner(ort_session(out / STREAMING_FILE))
    for utt in reference["utts"]:
        got = stream_log_probs(run, utt["feats"], meta, 4, 2)
        with torch.no_grad():
            want = model.ctc(utt["chunk_by_chunk_encoder_out"])[:, :got.size(1)]
        assert got.size(1) >= 12 and (got - want).abs().max() < TOLERANCE, utt["wav"]


def greedy_text(log_probs: torch.Tensor, units: list[str]) -> str:
    ids = torch.unique_consecutive(log_probs.reshape(-1, log_probs.size(-1)).argmax(-1)).tolist()
    return "".join(units[i] for i in ids if i != 0).replace("\u2581", " ").strip()


def char_distance(a: str, b: str) -> int:
    """Levenshtein distance of two strings."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def assert_close_text(got: str, log_probs: torch.Tensor, units: list[str], what) -> None:
    """sherpa-onnx's text ``got`` is the greedy text of asrkit's ``log_probs`` within
    :data:`SHERPA_DITHER_CHARS` characters.  sherpa-onnx 2.0.1 dithers its filterbank (about
    one 16-bit step of Gaussian noise, drawn anew on every call, whatever
    ``FeatureExtractorConfig.dither`` says; docs/export.md), which moves the frames of
    digital silence, and WeNet's barely trained reference models flip a token there now
    and then; tests/export/test_sherpa_runtime.py compares a trained model exactly."""
    want = greedy_text(log_probs, units)
    assert char_distance(got, want) <= SHERPA_DITHER_CHARS, (what, got, want)


SHERPA_DITHER_CHARS = 2


@pytest.mark.parametrize("name", ["offline", "u2pp"])
def test_sherpa_onnx_decodes_like_asrkit_offline(wenet_exports, name):
    model, out, _ = wenet_exports[name]
    units = [line.split()[0] for line in (out / "tokens.txt").read_text().splitlines()]
    recognizer = offline_recognizer(out)
    int8 = offline_recognizer(out, model=int8_name(out / OFFLINE_FILE).name)
    for wav in WAVS:
        samples, rate = sf.read(wav, dtype="float32")
        log_probs = eager_log_probs(model, fbank(samples, rate, **RUNTIME), model.cmvn)
        assert greedy_text(log_probs, units)
        assert_close_text(decode_offline(recognizer, samples, rate).text.strip(), log_probs, units, wav.name)
        assert isinstance(decode_offline(int8, samples, rate).text, str)
        resampled = decode_offline(recognizer, samples[::2].copy(), rate // 2)  # sherpa resamples itself
        assert isinstance(resampled.text, str)


def test_sherpa_onnx_streams_like_asrkit(wenet_exports):
    """sherpa-onnx's OnlineRecognizer fed 100 ms pieces and tail padding gives the greedy
    text of the same chunks computed by asrkit (onnxruntime, asrkit's fbank)."""
    model, out, _ = wenet_exports["u2pp"]
    units = [line.split()[0] for line in (out / "tokens.txt").read_text().splitlines()]
    meta = read_metadata(out / STREAMING_FILE)
    run = session_runner(ort_session(out / STREAMING_FILE))
    for chunk, left in ((16, 4), (4, 2)):
        recognizer = online_recognizer(out, chunk_size=chunk, num_left_chunks=left)
        for wav in WAVS:
            samples, rate = sf.read(wav, dtype="float32")
            padded = np.concatenate([samples, np.zeros(int(TAIL_PADDING_S * rate), np.float32)])
            log_probs = stream_log_probs(run, fbank(padded, rate, **RUNTIME), meta, chunk, left)
            assert_close_text(decode_streaming(recognizer, samples, rate).strip(), log_probs, units, (wav.name, chunk))


def test_a_model_without_ctc_head_or_with_a_centred_convolution_is_refused(tmp_path):
    units = [f"u{i}" for i in range(12)]
    with pytest.raises(ValueError, match="no CTC head"):
        export_onnx(tiny_model(80, 12, model_conf={"ctc_weight": 0.0}).eval(), units, tmp_path, num_mel_bins=80)
    with pytest.raises(ValueError, match="not causal"):
        export_onnx(tiny_model(80, 12).eval(), units, tmp_path, num_mel_bins=80, streaming=True)
    assert not list(Path(tmp_path).iterdir())  # refused before anything is written


@pytest.mark.parametrize("encoder", ["branchformer", "e_branchformer"])
def test_streaming_export_of_a_branchformer_is_refused(encoder):
    """A Branchformer's or an E-Branchformer's cgMLP cache is not the conformer's shape
    sherpa-onnx's streaming layout holds: refused in one line, for the CTC layout and the
    transducer's (offline metadata is unaffected)."""
    from asrkit.config import TrainConfig
    from asrkit.export.onnx import metadata
    from asrkit.export.onnx_transducer import streaming_geometry
    from asrkit.models import build_model
    from asrkit.schema import build
    from asrkit.text.vocabulary import Vocabulary
    cfg = build(TrainConfig, {"encoder": encoder, "encoder_conf": {
        "output_size": 16, "attention_heads": 2, "cgmlp_linear_units": 16, "cgmlp_conv_kernel": 3, "num_blocks": 1,
        "causal": True, "use_dynamic_chunk": True}, "decoder_conf": {"num_blocks": 1, "linear_units": 16}})
    model = build_model(cfg, 20, Vocabulary.of_size(8))
    assert metadata(model, streaming=False)["subsampling_factor"] == "4"
    refused = f"streaming ONNX export of encoder {encoder} is not implemented"
    with pytest.raises(ValueError, match=refused):
        metadata(model, streaming=True)
    with pytest.raises(ValueError, match=refused):
        streaming_geometry(model, 16, 4)
