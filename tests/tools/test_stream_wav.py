"""``tools/stream_wav.py`` on WeNet's U2++ experiment as it is: partial lines with their audio
time and compute time, then WeNet's chunked attention-rescoring transcript; bad input is
one line and status 2."""
from __future__ import annotations

import pytest
import torch

from asrkit.text import read_units
from tests.models.wenet_reference import FIXTURES
from tools import stream_wav as stream_wav_tool

pytestmark = pytest.mark.usefixtures("restore_threads")  # (tests/conftest.py: the tool sets --num_threads)


@pytest.fixture
def stream_wav(monkeypatch):
    monkeypatch.chdir(FIXTURES / "u2pp")  # WeNet's saved paths are relative to its experiment
    return stream_wav_tool.main


def test_partials_then_wenets_final_transcript(stream_wav, capsys):
    wav = FIXTURES / "wavs" / "Mike-test-00002.wav"
    assert stream_wav(["--config", "train.yaml", "--checkpoint", "epoch_5.pt", "--chunk_size", "4",
                       "--beam_size", "4", "--reverse_weight", "0.3", str(wav)]) == 0
    out = capsys.readouterr()
    rows = [line.split("\t") for line in out.out.splitlines()]
    kinds = [r[1] for r in rows]
    assert kinds[-1] == "final" and set(kinds[:-1]) == {"partial"} and len(kinds) > 5
    times = [float(r[2]) for r in rows[:-1]]
    assert times == sorted(times) and times[0] < 0.5  # a partial within the first half second
    assert all(float(r[3]) > 0 for r in rows[:-1])
    ref = torch.load(FIXTURES / "u2pp" / "reference_chunk4.pt", weights_only=True)["utts"][0]
    units = read_units(FIXTURES / "u2pp" / "units.txt")
    want = "".join(units[t] for t in ref["decode_chunk"]["attention_rescoring"]["tokens"]).replace("▁", " ").strip()
    assert rows[-1][4] == want
    assert "compute per chunk: median" in out.err


def test_a_missing_wav_is_one_line_and_status_2(stream_wav, capsys):
    assert stream_wav(["--config", "train.yaml", "--checkpoint", "epoch_5.pt", "nope.wav"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "nope.wav" in err[0]


def test_a_full_context_model_is_refused_with_the_reason(monkeypatch, capsys):
    monkeypatch.chdir(FIXTURES / "offline")
    wav = FIXTURES / "wavs" / "Mike-test-00002.wav"
    assert stream_wav_tool.main(["--config", "train.yaml", "--checkpoint", "nowhere.pt", str(wav)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.splitlines()) == 1
    assert "decoding_chunk_size 16: the model was trained with full context only" in out.err
