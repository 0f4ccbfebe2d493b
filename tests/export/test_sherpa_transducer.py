"""Transducers in sherpa-onnx (asrkit.export.onnx_transducer, asrkit.export.sherpa_transducer):
the real sherpa-onnx runtime, through its public API only (``OfflineRecognizer.
from_transducer``, ``OnlineRecognizer.from_transducer``), gives the transcripts of asrkit's
greedy search limited to one symbol per frame (offline) and of asrkit's chunk-by-chunk
encoder with that search (streaming), fp32 and int8, on the features the runtime computes;
the layouts and metadata sherpa-onnx reads; the decoder's ``−1`` is the zero history;
a batch of streams equals the streams one by one; what cannot be exported is refused; the
export says, in one line, when asrkit's greedy search emits several symbols on a frame,
which sherpa-onnx's cannot, and is silent for a model of the modified lattice."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asrkit.config import TrainConfig, load_config

from asrkit.schema import build
from asrkit.export import sherpa_transducer as st
from asrkit.export.onnx import int8_name, ort_session, session_runner
from asrkit.export.one_symbol_per_frame import search_mismatch
from asrkit.export.onnx_transducer import (DECODER_FILE, ENCODER_FILE, JOINER_FILE, STREAMING_ENCODER_FILE, Fbank,
                                           export_transducer_onnx, initial_states)
from asrkit.export.sherpa import read_metadata
from asrkit.metrics import align
from asrkit.models import build_model
from asrkit.text.vocabulary import Vocabulary
from tests.helpers import cpuinfo_flags
from tests.models.transducer.tiny import TINY_TRANSDUCER, tiny_transducer
from tests.models.transducer.wenet_transducer import FIXTURES, load_wenet_transducer

WAVS = sorted((FIXTURES.parent / "wavs").glob("*.wav"))
U2PP = "rnnt_stateless_u2pp"
CHUNK, LEFT = 4, 2  # WeNet's chunk-4 references; R = 8 cached frames, so the cache fills and slides

pytestmark = pytest.mark.usefixtures("one_thread")


def units_of(folder: Path) -> list[str]:
    return [line.rsplit(" ", 1)[0] for line in (folder / "tokens.txt").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def audio() -> list[tuple[np.ndarray, int]]:
    return [sf.read(w, dtype="float32") for w in WAVS]


@pytest.fixture(scope="module")
def u2pp(tmp_path_factory, audio):
    """WeNet's U2++ transducer (``embedding`` predictor, context 2) exported offline and
    streaming (chunk 4, 2 left chunks), fp32 + int8, with the training filterbank of its
    config, the fixture wavs as its check audio."""
    model = load_wenet_transducer(U2PP)
    fbank = Fbank.from_config(load_config(FIXTURES / U2PP / "train.yaml"))
    units = [line.split()[0] for line in (FIXTURES / U2PP / "units.txt").read_text().splitlines()]
    out = tmp_path_factory.mktemp("u2pp_transducer")
    summary = export_transducer_onnx(model, units, out, fbank=fbank, streaming=True, chunk_size=CHUNK,
                                     num_left_chunks=LEFT, check_audio=audio)
    return model, out, summary


def test_the_files_carry_sherpas_layout_and_the_checks_ran(u2pp):
    model, out, summary = u2pp
    assert set(summary["max_abs_diff"]) == {ENCODER_FILE, DECODER_FILE, JOINER_FILE, STREAMING_ENCODER_FILE}
    assert max(summary["max_abs_diff"].values()) < 1e-4
    for name in (ENCODER_FILE, DECODER_FILE, JOINER_FILE, STREAMING_ENCODER_FILE):
        assert (out / name).exists() and int8_name(out / name).exists()
    assert units_of(out)[:3] == ["<blank>", "<unk>", "<sos/eos>"]
    decoder = read_metadata(out / DECODER_FILE)
    assert (decoder["vocab_size"], decoder["context_size"]) == ("19", "2")
    meta = read_metadata(out / STREAMING_ENCODER_FILE)
    want = {"model_type": "conformer", "num_encoder_layers": "2", "T": str((CHUNK - 1) * 4 + 7),
            "decode_chunk_len": str(CHUNK * 4), "left_context": str(CHUNK * LEFT), "encoder_dim": "64",
            "pad_length": "3", "cnn_module_kernel": "15"}
    assert {k: meta[k] for k in want} == want
    # by position, as sherpa-onnx feeds them; the caches exactly [L, left_context, N, D], [L, kernel-1, N, D]
    session = ort_session(out / STREAMING_ENCODER_FILE)
    assert [i.name for i in session.get_inputs()] == ["x", "attn_cache", "conv_cache", "processed_frames"]
    attn, conv = initial_states(meta, n=2)
    enc, next_attn, next_conv = session_runner(session)(torch.zeros(2, int(meta["T"]), 80), attn, conv,
                                                        torch.tensor([0, 0]))
    assert enc.shape == (2, CHUNK, 64) and next_attn.shape == (2, 8, 2, 64) and next_conv.shape == (2, 14, 2, 64)
    assert [i.name for i in ort_session(out / DECODER_FILE).get_inputs()] == ["y"]
    assert [i.name for i in ort_session(out / JOINER_FILE).get_inputs()] == ["encoder_out", "decoder_out"]


def test_the_decoder_reads_minus_one_as_the_zero_history(u2pp):
    """sherpa-onnx starts from ``[-1, 0]``: that must be the predictor's first step from its
    initial (zero) state, which ``[0, 0]`` (a blank embedding in the history) is not."""
    model, out, _ = u2pp
    run = session_runner(ort_session(out / DECODER_FILE))
    with torch.no_grad():
        first, _ = model.predictor.forward_step(torch.tensor([[0]]), torch.zeros(1, 1), model.predictor.init_state(1, "cpu"))
        want = model.joint.project_predictor(first[0])
    (start,) = run(torch.tensor([[-1, 0]]))
    (blank_history,) = run(torch.tensor([[0, 0]]))
    assert np.abs(start - want.numpy()).max() < 1e-5
    assert np.abs(blank_history - want.numpy()).max() > 1e-2


def exact_int8_kernels() -> bool:
    """Whether onnxruntime's int8 matmuls accumulate exactly here: with AVX512-VNNI the
    u8·s8 products sum in int32 (the AVX-512 EPYC and the AMX Xeon of the project's machines
    gave fp32's transcripts in int8); AVX2's pairwise vpmaddubsw saturates at int16 and rounds
    differently (one of the three wavs changed two symbols on an AVX2 EPYC)."""
    return "avx512_vnni" in cpuinfo_flags()


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_sherpa_offline_equals_asrkits_one_symbol_per_frame_greedy(u2pp, audio, int8):
    """fp32: the same symbols on every wav, on any CPU.  int8: the same where the CPU's int8
    kernels are exact (:func:`exact_int8_kernels`), else within 20 % symbol edits of them in
    all (quantization noise, not a broken graph: that scores far worse)."""
    model, out, _ = u2pp
    meta = read_metadata(out / ENCODER_FILE)
    norm, units = st.adapter(model, meta), units_of(out)
    recognizer = st.offline_recognizer(out, int8=int8)
    edits = total = 0
    for (samples, rate), wav in zip(audio, WAVS):
        want = st.sherpa_symbols(st.asrkit_offline_tokens(model, norm, st.runtime_features(meta, samples, rate)), units)
        assert want, wav.name
        got = st.decode_offline(recognizer, samples, rate)
        if not int8 or exact_int8_kernels():
            assert got == want, wav.name
        a = align(want, got)
        edits, total = edits + a.errors, total + len(want)
    assert edits <= 0.2 * total, (edits, total)


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_sherpa_streams_as_asrkits_chunked_greedy(u2pp, audio, int8):
    """The three wavs streamed side by side (``decode_streams`` runs them as one batch),
    100 ms pieces, tail padding; asrkit: the same windows through ``forward_chunk_by_chunk``
    (chunk 4, 2 left chunks) and the one-symbol greedy search."""
    model, out, _ = u2pp
    meta = read_metadata(out / STREAMING_ENCODER_FILE)
    norm, units, tail = st.adapter(model, meta), units_of(out), st.tail_padding_s(meta)
    got = st.decode_streaming(st.online_recognizer(out, int8=int8), audio, tail)
    for (samples, rate), tokens, wav in zip(audio, got, WAVS):
        padded = np.concatenate([samples, np.zeros(int(tail * rate), np.float32)])
        want = st.asrkit_streaming_tokens(model, norm, st.runtime_features(meta, padded, rate), meta)
        assert want and tokens == st.sherpa_symbols(want, units), wav.name


def conv_u2pp_transducer(pos: str, encoder: str = "conformer", rnnt_type: str = "regular"):
    """A random tiny U2++ transducer with a ``conv`` predictor (context 3), positional
    encoding ``pos`` and ``encoder`` (a transformer: no convolution, an empty convolution
    cache), of the ``rnnt_type`` lattice, its blank pushed down so that greedy search emits
    tokens."""
    conf = copy.deepcopy(TINY_TRANSDUCER)
    conf["encoder"] = encoder
    conf["model_conf"]["rnnt_type"] = rnnt_type
    if encoder == "conformer":
        conf["encoder_conf"].update({"causal": True, "cnn_module_norm": "layer_norm"})
    else:
        del conf["encoder_conf"]["cnn_module_kernel"]
    conf["encoder_conf"].update({"pos_enc_layer_type": pos, "use_dynamic_chunk": True})
    if pos == "abs_pos":
        conf["encoder_conf"]["selfattention_layer_type"] = "selfattn"
    conf["predictor"] = "conv"
    conf["predictor_conf"] = {"embed_size": 16, "output_size": 16, "embed_dropout": 0.0, "history_size": 2}
    torch.manual_seed(0)
    model = build_model(build(TrainConfig, conf), 80, Vocabulary.of_size(12)).eval()
    with torch.no_grad():
        model.joint.ffn_out.bias[0] -= 3.0
    return model


@pytest.mark.parametrize("pos,encoder", [("rel_pos_xl", "conformer"), ("abs_pos", "conformer"),
                                         ("abs_pos", "transformer")])
def test_a_conv_predictor_exports_and_a_batch_of_streams_equals_each_stream(tmp_path, audio, pos, encoder):
    """Its export checks pass (decoder windows from ``[-1, -1, 0]``, streaming encoder vs
    eager); sherpa-onnx's offline greedy equals asrkit's; and the streaming encoder run on
    two streams at different positions at once equals each run alone."""
    model = conv_u2pp_transducer(pos, encoder)
    units = ["<blank>"] + [f"t{i}" for i in range(1, 12)]
    summary = export_transducer_onnx(model, units, tmp_path, streaming=True, chunk_size=4, num_left_chunks=1,
                                     int8=False)
    assert max(summary["max_abs_diff"].values()) < 1e-4
    assert read_metadata(tmp_path / DECODER_FILE)["context_size"] == "3"
    meta = read_metadata(tmp_path / ENCODER_FILE)
    recognizer = st.offline_recognizer(tmp_path)
    for samples, rate in audio:  # (with abs_pos the first tokens change if [-1, -1, 0] is not the zero history)
        want = st.asrkit_offline_tokens(model, st.adapter(model, meta), st.runtime_features(meta, samples, rate))
        assert want and st.decode_offline(recognizer, samples, rate) == st.sherpa_symbols(want, units)
    smeta = read_metadata(tmp_path / STREAMING_ENCODER_FILE)
    run = session_runner(ort_session(tmp_path / STREAMING_ENCODER_FILE))
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, int(smeta["T"]), 80, generator=generator) * 3 - 5
    attn, conv = (torch.randn(*s.shape, generator=generator) for s in initial_states(smeta, n=2))
    frames = torch.tensor([0, 5 * int(smeta["decode_chunk_len"])])
    together = run(x, attn, conv, frames)
    for b in range(2):
        alone = run(x[b:b + 1], attn[:, :, b:b + 1], conv[:, :, b:b + 1], frames[b:b + 1])
        assert np.abs(together[0][b:b + 1] - alone[0]).max() < 1e-5  # encoder_out [N, chunk, J]
        for got, want in zip(together[1:], alone[1:]):                # caches [L, rows, N, D] (rows may be 0)
            assert got[:, :, b:b + 1].shape == want.shape and np.allclose(got[:, :, b:b + 1], want, rtol=0, atol=1e-5)


def test_the_export_counts_the_frames_of_several_symbols_sherpas_search_cannot_emit(u2pp):
    """WeNet's model is of the regular lattice: on the fixture wavs asrkit's greedy search
    emits more than one symbol on 8 of 85 frames, which sherpa-onnx's one-symbol search
    cannot (its transcript of one wav differs); the summary counts them and says so in one
    line with the fix."""
    _, _, summary = u2pp
    assert summary["symbols_per_frame"] == {"utterances": 3, "frames": 85, "multi_symbol_frames": 8, "tokens": 35}
    line = summary["search_mismatch"]
    assert line.startswith("8 of 85 encoder frames (9.4 %) of 3 check utterances emit more than one symbol under "
                           "asrkit's greedy search (rnnt_greedy_search); sherpa-onnx's transducer search emits at "
                           "most one per frame, so its transcripts can differ") and "\n" not in line
    assert line.endswith("Train with model_conf.rnnt_type: modified (one symbol per frame; docs/export.md) for "
                         "the same transcripts in both")


def test_a_model_of_the_modified_lattice_is_not_warned_about(tmp_path, audio):
    """asrkit searches it one symbol per frame, as sherpa-onnx does: counted on speech, no
    frame has two (every one has one: its blank is pushed down); no line, with or without
    check audio."""
    model = conv_u2pp_transducer("rel_pos", rnnt_type="modified")
    summary = export_transducer_onnx(model, ["<blank>"] + [f"t{i}" for i in range(1, 12)], tmp_path, int8=False,
                                     verify=False, check_audio=audio)
    assert summary["symbols_per_frame"] == {"utterances": 3, "frames": 85, "multi_symbol_frames": 0, "tokens": 85}
    assert summary["search_mismatch"] is None and search_mismatch(model, None) is None


def test_an_lstm_predictor_or_a_centred_convolution_is_refused(tmp_path):
    with pytest.raises(ValueError, match="predictor: rnn cannot be exported for sherpa-onnx: its state is a "
                                         "recurrent hidden state, not a fixed context of tokens"):
        export_transducer_onnx(tiny_transducer(80, 12).eval(), [f"u{i}" for i in range(12)], tmp_path)
    model = conv_u2pp_transducer("rel_pos")
    model.encoder.encoders[0].conv_module.causal = False
    with pytest.raises(ValueError, match="not causal"):
        export_transducer_onnx(model, [f"u{i}" for i in range(12)], tmp_path, streaming=True)
    assert not list(tmp_path.iterdir())  # refused before anything is written


def test_the_cli_writes_the_transducer_layout_and_refuses_an_lstm_predictor(tmp_path, caplog, u2pp):
    """Also: ``--check_data`` (the fixture wavs) gives the summary's line as the one warning."""
    from asrkit.bin.export_onnx import main

    def args(name):
        folder = FIXTURES / name
        return ["--config", str(folder / "train.yaml"), "--checkpoint", str(folder / "epoch_5.pt"),
                "--override", f"tokenizer_conf.symbol_table_path={folder / 'units.txt'}",
                "--override", f"cmvn_conf.cmvn_file={folder / 'global_cmvn'}", "--int8", "false"]

    assert main([*args(U2PP), "--output_dir", str(tmp_path / "a"), "--chunk_size", "4", "--num_left_chunks", "2",
                 "--check_data", *map(str, WAVS)]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        [DECODER_FILE, ENCODER_FILE, JOINER_FILE, STREAMING_ENCODER_FILE, "tokens.txt"])
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [u2pp[2]["search_mismatch"]]
    assert read_metadata(tmp_path / "a" / STREAMING_ENCODER_FILE)["left_context"] == "8"
    assert main([*args("rnnt_offline"), "--output_dir", str(tmp_path / "b")]) == 2
    assert "predictor: rnn cannot be exported" in caplog.text and not (tmp_path / "b").exists()
