"""Every part that offers decoding modes offers exactly those the registry
(``asrkit.decode.modes.REGISTRY``) gives it, read from there and never from a list of its
own: the exported module (``decode``'s branches, ``supported_modes()``), the stream's
searches, the command lines, transcription (and its token times), the server and
``tools/decode_exported.py``; and the command lines' and the server's decoding defaults are
``DecodingOptions``'."""
from __future__ import annotations

import argparse
import ast
import inspect
import textwrap

import pytest
import torch

import tools.decode_exported as decode_exported
from asrkit.bin import cli, recognize
from asrkit.decode import REGISTRY, DecodingOptions, ModeError
from asrkit.decode.batch import encoder_output
from asrkit.decode.modes import CTC_HEAD, DecodingMode, mode_names, partial_modes, register_mode, runnable_modes
from asrkit.decode.options import DEFAULTS
from asrkit.decode.searcher import Searcher
from asrkit.decode.shared import transducer_parts
from asrkit.export.torchscript import SCRIPTED_MODES, ScriptableAsr
from asrkit.serve.model import ServedModel, ServeSettings, SettingsError, served_modes
from asrkit.stream.searches import STREAM_SEARCHES, stream_search, streamed_modes
from asrkit.transcribe import transcriber as transcriber_module
from asrkit.transcribe.loading import Backend
from asrkit.transcribe.transcriber import Transcriber
from tests.helpers import REPO
from tests.models.tiny import tiny_model
from tests.models.transducer.tiny import tiny_transducer

pytestmark = pytest.mark.usefixtures("one_thread")

FEAT = dict(sample_rate=16000, num_mel_bins=20, frame_length=25.0, frame_shift=10.0)


@pytest.fixture(scope="module")
def models():
    """A CTC/attention model and a transducer with a CTC head and a decoder: between them every
    registered mode runs (the transducer runs all of them)."""
    return {"ctc_attention": tiny_model(vocab_size=9, seed=1).eval(),
            "transducer": tiny_transducer(vocab_size=9, seed=2).eval()}


def wrapper(model) -> ScriptableAsr:
    """The exported module before scripting (what it offers is set when it is built)."""
    return ScriptableAsr(model, [f"u{i}" for i in range(model.vocab_size)], **FEAT)


@pytest.fixture
def unstreamed_mode():
    """A registered CTC mode that no stream runs (``stream`` left out), removed afterwards."""
    mode = register_mode(DecodingMode("ctc_unstreamed", (CTC_HEAD,), lambda shared: [[] for _ in shared.nbest()[0]],
                                      "a mode without a streaming search"))
    try:
        yield mode.name
    finally:
        del REGISTRY[mode.name]


# ----------------------------------------------------------------------------- the exported module


def scripted_branches() -> set[str]:
    """The mode names ``ScriptableAsr.decode`` compares ``mode`` with or looks up in ``chosen``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(ScriptableAsr.decode)))
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(isinstance(s, ast.Name) and s.id in ("mode", "chosen") for s in sides):
            names |= {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
    return names


def test_the_exported_module_runs_the_registrys_scripted_modes(models):
    scripted = [name for name, mode in REGISTRY.items() if mode.scripted]
    assert list(SCRIPTED_MODES) == scripted
    assert scripted_branches() == set(scripted)  # (one branch per scripted mode, none for another)
    offered = set()
    for model in models.values():
        supported = wrapper(model).supported_modes()
        assert supported == [name for name in scripted if name in runnable_modes(model)]
        offered |= set(supported)
    assert offered == set(scripted)


# ----------------------------------------------------------------------------- streaming


def test_a_stream_runs_the_modes_with_a_streaming_search(models, unstreamed_mode):
    assert streamed_modes() == [name for name, mode in REGISTRY.items() if mode.stream is not None]
    assert unstreamed_mode not in streamed_modes()
    assert set(STREAM_SEARCHES) == {REGISTRY[name].stream.kind for name in streamed_modes()}
    model = models["transducer"]
    searcher = Searcher.of_model(model)
    for name in streamed_modes():
        options = DecodingOptions(modes=(name,), beam_size=2, decoding_chunk_size=4)
        streaming = REGISTRY[name].stream
        search = stream_search(model, searcher, options)
        assert type(search) is STREAM_SEARCHES[streaming.kind], name
        if streaming.search is not None:
            made = streaming.search(transducer_parts(model)[0], torch.device("cpu"), options)
            assert type(search.search) is type(made), name
    with pytest.raises(ModeError, match="mode ctc_unstreamed has no streaming search"):
        stream_search(model, searcher, DecodingOptions(modes=(unstreamed_mode,), decoding_chunk_size=4))


# ----------------------------------------------------------------------------- command lines


def action(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    return next(a for a in parser._actions if a.dest == dest)


def subparser(name: str) -> argparse.ArgumentParser:
    return action(cli.build_parser(), "command").choices[name]


def test_the_command_lines_offer_the_registrys_modes():
    assert action(recognize.build_parser(), "modes").choices == mode_names()
    # asrkit transcribe and asrkit serve take any registered mode: DecodingOptions checks it
    for name in ("transcribe", "serve"):
        mode = action(subparser(name), "mode")
        assert mode.choices is None and mode.default in REGISTRY, name
    assert action(decode_exported.build_parser(), "mode").choices is None  # (the archive's modes, below)


def test_the_command_lines_and_the_server_default_to_decoding_options():
    required = ["--config", "c", "--checkpoint", "k", "--data", "d", "--result_dir", "r"]
    assert recognize.decoding_options(recognize.build_parser().parse_args(required)) == DecodingOptions()
    renamed = {"mode": "modes", "left_chunks": "num_decoding_left_chunks"}
    for name in ("transcribe", "serve"):
        parser = subparser(name)
        args = vars(parser.parse_args(["x.wav"] if name == "transcribe" else []))
        for dest, value in args.items():
            field = renamed.get(dest, dest)
            if field in DEFAULTS and dest != "chunk":
                expected = {"modes": DEFAULTS["modes"][0], "context_strict": "true"}.get(field, DEFAULTS[field])
                assert value == expected, (name, dest)
    settings = ServeSettings()
    assert (settings.mode, settings.left_chunks, settings.beam_size, settings.ctc_weight, settings.reverse_weight) == (
        DEFAULTS["modes"][0], DEFAULTS["num_decoding_left_chunks"], DEFAULTS["beam_size"], DEFAULTS["ctc_weight"],
        DEFAULTS["reverse_weight"])


# ----------------------------------------------------------------------------- transcription and the server


class TinyBackend(Backend):
    """A model held in memory as transcription holds a loaded one (no fbank here: the tests
    hand features to the decoding)."""

    sample_rate, frame_shift, frame_length, min_input_length, description = 16000, 10.0, 25.0, 7, "tiny"

    def __init__(self, model, chunk_trained: bool = False):
        self.model, self.decoding_source, self.chunk_trained = model, model, chunk_trained
        self.searcher = Searcher.of_model(model)
        self.has_ctc, self.bidirectional, self.blank = model.ctc is not None, self.searcher.bidirectional, 0
        self.units = [f"u{i}" for i in range(model.vocab_size)]

    def encode(self, feats, lengths, options):
        return encoder_output(self.model, feats, lengths, options)

    def check_mode(self, mode: str) -> None:
        from asrkit.decode.modes import check_modes
        check_modes(self.model, [mode])


def test_transcription_offers_the_modes_the_model_runs_with_the_registrys_times(models, monkeypatch):
    aligned = []
    for name in ("forced_alignment", "best_path_spans"):
        real = getattr(transcriber_module, name)
        monkeypatch.setattr(transcriber_module, name, lambda *a, real=real: aligned.append(1) or real(*a))
    feats = torch.randn(40, 20, generator=torch.Generator().manual_seed(3))
    for model in models.values():
        transcriber = Transcriber(TinyBackend(model))
        offered = []
        for name in REGISTRY:
            options = DecodingOptions(modes=(name,), beam_size=2)
            try:
                transcriber.check_options(options)
            except ModeError:
                continue
            offered.append(name)
            aligned.clear()
            ids, spans, _ = transcriber._decode(feats, name, options)
            # the search's own emission frames for a timed mode, else the CTC alignment
            assert bool(aligned) == (REGISTRY[name].timed is None), name
            if REGISTRY[name].timed is not None:
                assert spans is not None and len(spans) == len(ids) and all(e == s + 1 for s, e in spans), name
        assert offered == runnable_modes(model)


@pytest.mark.parametrize("chunk_trained", [False, True])
def test_the_server_offers_the_modes_the_model_runs(models, chunk_trained, unstreamed_mode):
    kind = "chunks" if chunk_trained else "segments"
    assert served_modes(kind) == (streamed_modes() if chunk_trained else list(REGISTRY))
    for model in models.values():
        transcriber = Transcriber(TinyBackend(model, chunk_trained))
        offered = []
        for name in REGISTRY:
            try:
                served = ServedModel(transcriber, ServeSettings(mode=name))
            except SettingsError:
                continue
            offered.append(name)
            assert served.kind == kind
            partial = next(m for m in [*partial_modes(), name] if m in runnable_modes(model))
            assert served.partial_options.modes == (partial,)
        assert offered == [name for name in served_modes(kind) if name in runnable_modes(model)]


# ----------------------------------------------------------------------------- tools/decode_exported.py


def test_decode_exported_offers_every_mode_the_archive_runs(models):
    # (the tool names no mode of its own but the default it prints: the archive says the rest)
    source = (REPO / "tools" / "decode_exported.py").read_text(encoding="utf-8")
    named = {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and n.value in REGISTRY}
    assert named == {decode_exported.DEFAULT_MODE}
    offered = set()
    for model in models.values():
        archive = wrapper(model)
        supported = archive.supported_modes()
        for name in REGISTRY:
            if name in supported:
                printed, decoded = decode_exported.decoded_modes(archive, name)
                assert printed == name and name in decoded and set(decoded) <= set(supported), name
                offered.add(name)
            else:
                with pytest.raises(SystemExit) as refused:
                    decode_exported.decoded_modes(archive, name)
                assert refused.value.code == 2, name
        assert decode_exported.decoded_modes(archive, None)[0] == "attention_rescoring"
    assert offered == set(SCRIPTED_MODES)
