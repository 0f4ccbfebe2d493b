"""8 kHz audio end to end, on real speech: a 16 kHz model given a recording at 8 kHz and the
same recording resampled to 16 kHz gives the same text in every runtime -- ``asrkit
transcribe`` (an experiment and its TorchScript ``final.zip``), ``recognize`` (a data list)
and sherpa-onnx (its own resampler) --; a model of features computed at 8 kHz takes 16 kHz
audio by resampling it down; and no path computes features at a rate other than the model's.

The model: ``tests/fixtures/asrkit_digits/mixed_real`` (the digits recipe's conformer trained on
synthesized digits and two FSDD speakers, george and jackson); the audio: lucas's takes, a
speaker it never heard (``corpora/fsdd``), isolated and joined into connected utterances."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch

from asrkit.bin import export, export_onnx, recognize
from asrkit.data.audio import resample
from asrkit.transcribe import load_model
from tests.helpers import REPO, connected_takes, fsdd_takes

MODEL = REPO / "tests" / "fixtures" / "asrkit_digits" / "mixed_real"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def recordings():
    """``(key, 8 kHz samples, transcript)``: 20 isolated takes of lucas and 3 connected utterances."""
    takes = fsdd_takes("lucas", range(2))
    out = [(name.split(".")[0], samples, word) for name, samples, word in takes]
    for i, start in enumerate((0, 5, 11)):
        chosen = takes[start:start + 4]
        out.append((f"lucas-c{i}", connected_takes([s for _, s, _ in chosen]), " ".join(w for _, _, w in chosen)))
    return out


def at_16k(samples: np.ndarray) -> np.ndarray:
    return resample(torch.from_numpy(samples)[None], 8000, 16000)[0].numpy()


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL)


def test_transcribe_gives_the_same_text_at_8_and_16_khz_from_the_experiment_and_its_archive(
        model, recordings, tmp_path_factory):
    out = tmp_path_factory.mktemp("archive")
    assert export.main(["--config", str(MODEL / "train.yaml"), "--checkpoint", str(MODEL / "avg_3.pt"),
                        "--output", str(out / "final.zip")]) == 0
    archive = load_model(out / "final.zip")
    assert model.sample_rate == archive.sample_rate == 16000
    right = 0
    for key, samples, ref in recordings:
        narrow = model.transcribe(samples, sample_rate=8000).text
        assert narrow == model.transcribe(at_16k(samples), sample_rate=16000).text, key
        assert narrow == archive.transcribe(samples, sample_rate=8000).text, key
        right += narrow == ref
    assert right >= len(recordings) // 2  # (a model that hears people: the texts compared are real ones)


def test_recognize_gives_the_same_text_for_an_8_khz_list_and_its_16_khz_copy(recordings, tmp_path):
    lists = {}
    for rate in (8000, 16000):
        rows = []
        for key, samples, ref in recordings:
            path = tmp_path / f"{key}_{rate}.wav"
            sf.write(path, samples if rate == 8000 else at_16k(samples), rate, subtype="FLOAT")
            rows.append(json.dumps({"key": key, "wav": str(path), "txt": ref}) + "\n")
        lists[rate] = tmp_path / f"{rate}.list"
        lists[rate].write_text("".join(rows))
    texts = {}
    for rate, data in lists.items():
        assert recognize.main(["--config", str(MODEL / "train.yaml"), "--checkpoint", str(MODEL / "avg_3.pt"),
                               "--data", str(data), "--modes", "attention_rescoring", "ctc_greedy_search",
                               "--result_dir", str(tmp_path / str(rate)), "--num_threads", "1"]) == 0
        texts[rate] = {m: (tmp_path / str(rate) / m / "text").read_text()
                       for m in ("attention_rescoring", "ctc_greedy_search")}
    assert texts[8000] == texts[16000]


def test_an_8_khz_model_takes_16_khz_audio_by_resampling_it_down(recordings, tmp_path):
    """The features of a model whose ``resample_rate`` is 8000 are computed at 8 kHz from any
    input: a 16 kHz copy is resampled down first (so the text is that of the 8 kHz original
    resampled down from the copy), never fed to an 8 kHz filterbank as it is."""
    import yaml
    cfg = yaml.safe_load((MODEL / "train.yaml").read_text())
    cfg["dataset_conf"]["resample_conf"] = {"resample_rate": 8000}
    narrow_dir = tmp_path / "narrow"
    narrow_dir.mkdir()
    for name in ("avg_3.pt", "global_cmvn", "units.txt"):
        (narrow_dir / name).symlink_to(MODEL / name)
    (narrow_dir / "train.yaml").write_text(yaml.safe_dump(cfg))
    narrow = load_model(narrow_dir)
    assert narrow.sample_rate == 8000
    for key, samples, _ in recordings[::4]:
        wide = at_16k(samples)
        down = resample(torch.from_numpy(wide)[None], 16000, 8000)[0].numpy()
        assert narrow.transcribe(wide, sample_rate=16000).text == narrow.transcribe(down, sample_rate=8000).text, key


def test_sherpa_onnx_gives_the_same_text_for_8_khz_audio_it_resamples_itself(model, recordings, tmp_path):
    """sherpa-onnx resamples an 8 kHz stream with its own filter; its text for the recording
    is its text for asrkit's 16 kHz copy and asrkit's own, but for the near-ties its dither
    may flip (docs/export.md)."""
    from asrkit.export.sherpa import decode_offline, offline_recognizer
    assert export_onnx.main(["--config", str(MODEL / "train.yaml"), "--checkpoint", str(MODEL / "avg_3.pt"),
                             "--output_dir", str(tmp_path), "--int8", "false", "--num_threads", "1"]) == 0
    recognizer = offline_recognizer(tmp_path)
    differ = []
    for key, samples, _ in recordings:
        narrow = decode_offline(recognizer, samples, 8000).text.strip()
        wide = decode_offline(recognizer, at_16k(samples), 16000).text.strip()
        if not narrow == wide == model.transcribe(samples, sample_rate=8000, mode="ctc_greedy_search").text:
            differ.append(key)
    assert len(differ) <= 1, differ
