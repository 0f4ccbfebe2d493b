"""``asrkit.load_model(...).transcribe(...)`` on WeNet's two reference experiments
(``tests/fixtures/wenet/{offline,u2pp}``, loaded from their folders as they are):

* WeNet's own tokens in all four modes from the wav files (full context, and chunk 4 with
  all / two left chunks on the U2++ model) -- features, loading and decoding together;
* a path, a numpy array and a tensor give the same transcript; 8 kHz and 44.1 kHz copies
  are resampled to the same text;
* an exported ``final.zip`` and the experiment directory give the same transcript;
* token times are the CTC spikes of the model's own log-probabilities, words group them;
* utterances joined with pauses are cut at the pauses (every model, by default) into parts
  whose transcripts, decoded alone, are its transcript (times offset to the file);
* checkpoint choice, config path resolution, and bad input."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import torch

import asrkit
from asrkit.data.audio import resample
from asrkit.decode.alignment import best_path_spans
from asrkit.decode import DecodingOptionError, DecodingOptions, ModeError
from asrkit.transcribe import AudioError, ModelLoadError, Segmentation, find_checkpoint, load_model
from asrkit.transcribe import TokenTime, group_words
from tests.helpers import REPO
from tests.models.wenet_reference import FIXTURES, MODES

WAVS = FIXTURES / "wavs"
MIKE = WAVS / "Mike-test-00002.wav"
WENET = dict(beam_size=4, ctc_weight=0.3, reverse_weight=0.3, blank_skip_threshold=1.0)  # WeNet's reference


@pytest.fixture(scope="module")
def u2pp():
    return load_model(FIXTURES / "u2pp")


@pytest.fixture(scope="module")
def offline():
    return load_model(FIXTURES / "offline")


def ids(model, result) -> list[int]:
    return [model.units.index(t) for t in result.tokens]


def test_import_asrkit_stays_light_and_exports_load_model():
    code = ("import sys, asrkit; assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'load_model' in asrkit.__all__")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert asrkit.load_model is load_model  # (attribute access imports it)
    with pytest.raises(AttributeError):
        asrkit.no_such_name


@pytest.mark.parametrize("name, reference, key", [("offline", "reference.pt", "decode_full"),
                                                  ("u2pp", "reference_chunk4.pt", "decode_full"),
                                                  ("u2pp", "reference_chunk4.pt", "decode_chunk"),
                                                  ("u2pp", "reference_chunk4_left2.pt", "decode_chunk")])
def test_wenets_tokens_in_every_mode_from_the_wav_files(name, reference, key, offline, u2pp):
    model = offline if name == "offline" else u2pp
    ref = torch.load(FIXTURES / name / reference, weights_only=True)
    chunk, left = (ref["chunk"], ref["left"]) if key == "decode_chunk" else (None, -1)
    for utt in ref["utts"]:
        for mode in MODES:
            got = model.transcribe(WAVS / utt["wav"], mode=mode, chunk=chunk, left_chunks=left,
                                   segmentation=Segmentation.whole(), **WENET)  # (as WeNet does)
            assert ids(model, got) == utt[key][mode]["tokens"], (utt["wav"], mode)
    if key == "decode_chunk":  # (the chunked references differ from full context: the option reaches the encoder)
        assert any(u[key][m]["tokens"] != u["decode_full"][m]["tokens"] for u in ref["utts"] for m in MODES)


def test_a_path_an_array_and_a_tensor_give_the_same_transcript(u2pp):
    samples, rate = sf.read(MIKE, dtype="float32")
    from_path = u2pp.transcribe(MIKE)
    assert from_path.text.startswith("eight nine") and from_path.duration == pytest.approx(samples.size / rate)
    assert u2pp.transcribe(samples, sample_rate=rate) == from_path
    assert u2pp.transcribe(torch.from_numpy(samples), sample_rate=rate) == from_path
    assert u2pp.transcribe(np.stack([samples, samples]), sample_rate=rate) == from_path  # [channels, T]
    int16 = np.round(samples * 32768).clip(-32768, 32767).astype(np.int16)
    assert u2pp.transcribe(int16, sample_rate=rate).text == from_path.text
    with pytest.raises(ValueError, match="sample_rate"):
        u2pp.transcribe(samples)


def test_other_sample_rates_are_resampled_to_the_models(u2pp, tmp_path):
    for wav in sorted(WAVS.glob("*.wav")):  # 44.1 kHz FLAC copies (16 bits): the same text
        samples, _ = sf.read(wav, dtype="float32")
        path = tmp_path / f"{wav.stem}.flac"
        sf.write(path, resample(torch.from_numpy(samples).unsqueeze(0), 16000, 44100)[0].numpy(), 44100)
        assert sf.info(path).samplerate == 44100
        result = u2pp.transcribe(path, mode="ctc_greedy_search")
        assert result.text == u2pp.transcribe(wav, mode="ctc_greedy_search").text, wav.name
        assert result.duration == pytest.approx(samples.size / 16000, abs=1e-3)
    # an 8 kHz copy has lost the band above 4 kHz (its text may differ): it decodes as the
    # band-limited original, i.e. the copy brought back to 16 kHz
    samples, _ = sf.read(MIKE, dtype="float32")
    narrow = resample(torch.from_numpy(samples).unsqueeze(0), 16000, 8000)
    sf.write(tmp_path / "mike_8k.wav", narrow[0].numpy(), 8000, subtype="FLOAT")
    for mode in MODES:
        assert (u2pp.transcribe(tmp_path / "mike_8k.wav", mode=mode)
                == u2pp.transcribe(resample(narrow, 8000, 16000)[0], 16000, mode=mode))


@pytest.fixture(scope="module")
def exported_u2pp(tmp_path_factory):
    from asrkit.bin import export
    out = tmp_path_factory.mktemp("export") / "final.zip"
    cwd = os.getcwd()
    os.chdir(FIXTURES / "u2pp")  # (WeNet's saved paths are relative to its experiment)
    try:
        assert export.main(["--config", "train.yaml", "--checkpoint", "epoch_5.pt", "--output", str(out)]) == 0
    finally:
        os.chdir(cwd)
    return load_model(out)


@pytest.mark.parametrize("chunk", [None, 4])
def test_final_zip_and_the_experiment_directory_agree(u2pp, exported_u2pp, chunk):
    for wav in sorted(WAVS.glob("*.wav")):
        for mode in MODES:
            want = u2pp.transcribe(wav, mode=mode, chunk=chunk)
            got = exported_u2pp.transcribe(wav, mode=mode, chunk=chunk)
            assert got.tokens == want.tokens and got.text == want.text, (wav.name, mode)
            assert [(t.start, t.end) for t in got.token_times] == [(t.start, t.end) for t in want.token_times]


def test_token_times_are_the_ctc_spikes_and_words_group_them(u2pp):
    model = u2pp.backend.model
    result = u2pp.transcribe(MIKE, mode="ctc_greedy_search")
    # the spikes computed here from the model itself: features, encoder, CTC, argmax runs
    samples, rate = sf.read(MIKE, dtype="float32")
    from asrkit.data.features import compute_fbank
    feats = compute_fbank(torch.from_numpy(samples).unsqueeze(0), rate, num_mel_bins=80, frame_length=25,
                          frame_shift=10)
    with torch.inference_mode():
        enc, _ = model.encode(feats.unsqueeze(0), torch.tensor([feats.size(0)]))
        spans = best_path_spans(model.ctc_log_probs(enc)[0], model.blank_id)
    assert [u2pp.units[s.token] for s in spans] == result.tokens
    assert [(t.start, t.end) for t in result.token_times] == [(s.start * 0.04, s.end * 0.04) for s in spans]
    words = result.words
    assert " ".join(w.word for w in words) == result.text
    pieces = "".join(result.tokens).split("\u2581")
    times, at = result.token_times, 0
    for word, piece in zip(words, pieces):  # each word: from its first unit's start to its last's end
        assert word.word == piece
        assert (word.start, word.end) == (times[at].start, times[at + len(piece) - 1].end)
        at += len(piece) + 1
    for mode in MODES:  # every mode: ordered spans inside the audio
        r = u2pp.transcribe(MIKE, mode=mode)
        assert all(0 <= t.start < t.end <= r.duration + 0.04 for t in r.token_times)
        assert [t.start for t in r.token_times] == sorted(t.start for t in r.token_times)
        assert r.to_dict()["token_times"][0] == {"token": r.tokens[0], "start": round(r.token_times[0].start, 3),
                                                 "end": round(r.token_times[0].end, 3)}


def joined_with_pauses(pause_s: float = 0.4) -> tuple[np.ndarray, list[int]]:
    """The three fixture utterances joined with ``pause_s`` of faint noise; where each starts."""
    pieces = [sf.read(w, dtype="float32")[0] for w in sorted(WAVS.glob("*.wav"))]
    gap = np.random.default_rng(0).normal(0.0, 0.002, int(pause_s * 16000)).astype(np.float32)
    starts = list(np.cumsum([0] + [p.size + gap.size for p in pieces[:-1]]))
    return np.concatenate([pieces[0], gap, pieces[1], gap, pieces[2]]), starts


def test_utterances_joined_with_pauses_are_decoded_part_by_part(u2pp):
    audio, starts = joined_with_pauses()
    for mode in ("ctc_greedy_search", "attention_rescoring"):
        joined = u2pp.transcribe(audio, 16000, mode=mode)
        assert len(joined.segments) == 3
        for (_, end), next_start in zip(joined.segments, starts[1:]):
            assert next_start / 16000 - 0.4 < end <= next_start / 16000 + 0.3  # each cut in (or at the edge of) a pause
        # the parts decoded alone: the same tokens, times offset by the part's start
        tokens, times = [], []
        for start, end in joined.segments:
            alone = u2pp.transcribe(audio[int(round(start * 16000)):int(round(end * 16000))], 16000, mode=mode,
                                    segmentation=Segmentation.whole())
            tokens += alone.tokens
            times += [(round(t.start + start, 6), round(t.end + start, 6)) for t in alone.token_times]
        assert joined.tokens == tokens
        assert [(round(t.start, 6), round(t.end, 6)) for t in joined.token_times] == times
    whole = u2pp.transcribe(audio, 16000, segmentation=Segmentation.whole())
    assert whole.segments == [(0.0, whole.duration)]


def test_every_model_is_cut_at_pauses_by_default(u2pp, offline, exported_u2pp):
    audio, _ = joined_with_pauses()
    for model in (u2pp, offline, exported_u2pp):
        result = model.transcribe(audio, 16000)
        assert len(result.segments) == 3 and result == model.transcribe(audio, 16000, segmentation=Segmentation())


def test_transcribe_with_options_built_beforehand(u2pp):
    """What ``asrkit transcribe`` calls: the same transcript as the keywords make; one mode only."""
    options = DecodingOptions(modes=["ctc_prefix_beam_search"], beam_size=4, decoding_chunk_size=4)
    assert u2pp.transcribe_with_options(MIKE, options) == u2pp.transcribe(MIKE, mode="ctc_prefix_beam_search",
                                                                          beam_size=4, chunk=4)
    with pytest.raises(DecodingOptionError, match="transcription decodes with one mode, got 2"):
        u2pp.transcribe_with_options(MIKE, DecodingOptions(modes=["attention", "attention_rescoring"]))


def test_words_from_char_bpe_cjk_and_space_separated_units():
    def words(units, space_separated=False):
        times = [TokenTime(u, float(i), i + 0.5) for i, u in enumerate(units)]
        return [(w.word, w.start, w.end) for w in group_words(times, space_separated)]
    assert words(["a", "b", "\u2581", "c"]) == [("ab", 0.0, 1.5), ("c", 3.0, 3.5)]
    assert words(["\u2581he", "llo", "\u2581wor", "ld"]) == [("hello", 0.0, 1.5), ("world", 2.0, 3.5)]
    assert words(["\u4f60", "\u597d", "ok"]) == [("\u4f60", 0.0, 0.5), ("\u597d", 1.0, 1.5), ("ok", 2.0, 2.5)]
    assert words(["\u2581", "a", "\u2581", "\u2581", "b", "\u2581"]) == [("a", 1.0, 1.5), ("b", 4.0, 4.5)]
    assert words(["sil", "a"], space_separated=True) == [("sil", 0.0, 0.5), ("a", 1.0, 1.5)]


def test_the_checkpoint_rule(tmp_path):
    """asrkit.checkpoint.names.checkpoint_to_decode (tests/io has its cases): names and
    recorded steps decide, never modification times."""
    for age, name in enumerate(("epoch_3.pt", "epoch_4.pt", "avg_5.pt", "avg_10.pt", "final.pt")):
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (2_000_000 - age, 2_000_000 - age))  # epoch_3 the newest file
    (tmp_path / "epoch_3.yaml").write_text("step: 30\n")
    (tmp_path / "epoch_4.yaml").write_text("step: 40\n")
    assert find_checkpoint(tmp_path).name == "avg_10.pt"  # the largest N, though avg_5.pt is newer
    for name in ("avg_5.pt", "avg_10.pt"):
        (tmp_path / name).unlink()
    assert find_checkpoint(tmp_path).name == "final.pt"
    (tmp_path / "final.pt").unlink()
    assert find_checkpoint(tmp_path).name == "epoch_4.pt"  # the larger recorded step, though older
    for name in ("epoch_3.pt", "epoch_4.pt"):
        (tmp_path / name).unlink()
    with pytest.raises(ModelLoadError, match="no checkpoint"):
        find_checkpoint(tmp_path)


def test_config_paths_resolve_from_the_recipe_dir_or_by_override(tmp_path, monkeypatch):
    recipe = tmp_path / "recipe"
    exp = recipe / "exp" / "u2pp"
    shutil.copytree(FIXTURES / "u2pp", exp)
    (recipe / "data" / "dict").mkdir(parents=True)
    shutil.move(exp / "units.txt", recipe / "data" / "dict" / "units.txt")
    text = (exp / "train.yaml").read_text()
    (exp / "train.yaml").write_text(text.replace("symbol_table_path: units.txt",
                                                 "symbol_table_path: data/dict/units.txt"))
    monkeypatch.chdir(tmp_path)  # neither the recipe nor the experiment
    want = load_model(FIXTURES / "u2pp").transcribe(MIKE).text
    assert load_model(exp, checkpoint="epoch_5.pt").transcribe(MIKE).text == want
    shutil.move(recipe / "data" / "dict" / "units.txt", tmp_path / "elsewhere.txt")
    with pytest.raises(ValueError, match="data/dict/units.txt"):
        load_model(exp)
    model = load_model(exp, overrides=[f"tokenizer_conf.symbol_table_path={tmp_path / 'elsewhere.txt'}"])
    assert model.transcribe(MIKE).text == want


def test_bf16_on_a_cpu_without_native_bf16_logs_trainings_warning_once(u2pp, monkeypatch, caplog):
    """The CPU's flags injected (CI's machines alternate between avx512_bf16 and AVX2-only):
    bf16 emulated is warned about with training's line, once per model (not per file), by
    the API and by ``asrkit transcribe``; with native bf16, or in fp32, nothing is said."""
    import asrkit.precision as precision
    from asrkit.bin import cli
    from asrkit.transcribe.transcriber import Transcriber
    avx2 = precision.CpuCapabilities(frozenset({"avx2", "fma"}), "AVX2")
    line = precision.cpu_precision("bf16", avx2).line
    monkeypatch.setattr(precision, "cpu_capabilities", lambda cpuinfo=None: avx2)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "asrkit.transcribe"]
    model = Transcriber(u2pp.backend)  # (a fresh model sharing the loaded one's backend)
    model.transcribe(MIKE, mode="ctc_greedy_search")
    assert warnings() == []
    for _ in range(2):
        model.transcribe(MIKE, mode="ctc_greedy_search", dtype="bf16")
    assert warnings() == [line]
    caplog.clear()
    assert cli.main(["transcribe", "--model", str(FIXTURES / "u2pp"), "--mode", "ctc_greedy_search", "--dtype",
                     "bf16", str(MIKE), str(MIKE)]) == 0
    assert warnings() == [line]
    caplog.clear()
    native = precision.CpuCapabilities(frozenset({"avx2", "avx512_bf16"}), "AVX512")
    monkeypatch.setattr(precision, "cpu_capabilities", lambda cpuinfo=None: native)
    Transcriber(u2pp.backend).transcribe(MIKE, mode="ctc_greedy_search", dtype="bf16")
    assert warnings() == []


def test_bad_input_raises_one_line_errors(u2pp, tmp_path):
    (tmp_path / "text.wav").write_text("not audio")
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    sf.write(tmp_path / "short.wav", np.zeros(800, np.float32), 16000)  # 50 ms: 3 frames < 7
    for name, reason in [("missing.wav", "missing_file"), ("text.wav", "unreadable_audio"),
                         ("empty.wav", "empty_audio"), ("short.wav", "too_short")]:
        with pytest.raises(AudioError) as caught:
            u2pp.transcribe(tmp_path / name)
        assert caught.value.reason == reason and str(tmp_path / name) in str(caught.value)
        assert "\n" not in str(caught.value)
    with pytest.raises(ModeError):
        u2pp.transcribe(MIKE, mode="no_such_mode")
    with pytest.raises(DecodingOptionError, match="num_decoding_left_chunks"):
        u2pp.transcribe(MIKE, chunk=4, left_chunks=-2)
    with pytest.raises(ModelLoadError):
        load_model(tmp_path / "nothing_here")
    with pytest.raises(ModelLoadError, match="no train.yaml"):
        load_model(tmp_path)
