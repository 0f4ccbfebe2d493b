"""``asrkit transcribe`` (asrkit/bin/cli.py) on WeNet's U2++ experiment: ``path<TAB>text``
per file, or JSON lines with token and word times; each bad file is one stderr line naming
it while the good ones are still transcribed, exit status 2; no traceback."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from asrkit.bin import cli
from asrkit.transcribe import load_model
from tests.helpers import REPO, repo_env
from tests.models.wenet_reference import FIXTURES

pytestmark = pytest.mark.usefixtures("restore_threads")  # (tests/conftest.py: the command sets --num_threads)

MODEL = str(FIXTURES / "u2pp")
GOOD = [str(FIXTURES / "wavs" / "Mike-test-00002.wav"), str(FIXTURES / "wavs" / "grandma-test-00125.wav")]


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL)


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "notes.wav").write_text("not audio")
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    sf.write(tmp_path / "short.wav", np.zeros(500, np.float32), 16000)
    return [str(tmp_path / n) for n in ("missing.wav", "notes.wav", "empty.wav", "short.wav")]


def test_texts_of_the_good_files_and_one_line_per_bad_file(model, bad_files, capsys):
    files = [GOOD[0], *bad_files, GOOD[1]]
    assert cli.main(["transcribe", "--model", MODEL, "--mode", "ctc_greedy_search", *files]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{w}\t{model.transcribe(w, mode='ctc_greedy_search').text}" for w in GOOD]
    lines = err.splitlines()
    assert len(lines) == len(bad_files)
    for line, path, reason in zip(lines, bad_files, ["no such file", "not a readable audio file",
                                                     "no audio samples", "too short"]):
        assert line.startswith(f"error: {path}: {reason}"), line
    assert "Traceback" not in err


def test_json_lines_hold_tokens_token_times_and_word_times(model, capsys):
    assert cli.main(["transcribe", "--model", MODEL, "--json", "--chunk", "4", *GOOD]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["path"] for r in rows] == GOOD
    for row, wav in zip(rows, GOOD):
        want = model.transcribe(wav, chunk=4).to_dict()
        assert {k: v for k, v in row.items() if k != "path"} == want
        assert [t["token"] for t in row["token_times"]] == row["tokens"]
        assert " ".join(w["word"] for w in row["words"]) == row["text"]
        assert all(t["start"] < t["end"] for t in row["token_times"])


def test_the_segmentation_options(model, tmp_path, capsys):
    from asrkit.transcribe import Segmentation
    gap = np.random.default_rng(0).normal(0, 0.002, 8000).astype(np.float32)  # 0.5 s
    audio = np.concatenate([sf.read(GOOD[0], dtype="float32")[0], gap, sf.read(GOOD[1], dtype="float32")[0]])
    two = str(tmp_path / "two.wav")
    sf.write(two, audio, 16000)
    assert cli.main(["transcribe", "--model", MODEL, "--json", two]) == 0
    row = json.loads(capsys.readouterr().out)
    assert len(row.pop("segments")) == 2  # cut at the pause by default
    assert cli.main(["transcribe", "--model", MODEL, "--json", "--min_pause_s", "1.0", two]) == 0
    row = json.loads(capsys.readouterr().out)
    assert len(row["segments"]) == 1  # a pause shorter than --min_pause_s does not cut
    row.pop("path")
    assert row == model.transcribe(two, segmentation=Segmentation(min_pause_s=1.0)).to_dict()
    assert cli.main(["transcribe", "--model", MODEL, "--json", "--no_vad", "--max_segment_s", "2", two]) == 0
    assert [e - s for s, e in json.loads(capsys.readouterr().out)["segments"]][:1] == [2.0]  # fixed pieces
    assert cli.main(["transcribe", "--model", MODEL, "--max_segment_s", "0.5", two]) == 2
    assert capsys.readouterr().err.strip() == "error: max_segment_s must be >= 1 s (or None: no limit), got 0.5"


def test_a_long_file_shows_a_progress_bar_on_a_terminal(tmp_path):
    """Run under a pseudo-terminal: tqdm's bar (seconds of audio done) is drawn on stderr."""
    import fcntl
    import pty
    import struct
    import termios
    pieces = [sf.read(w, dtype="float32")[0] for w in GOOD]
    gap = np.zeros(8000, np.float32)
    sf.write(tmp_path / "long.wav", np.concatenate([x for _ in range(40) for p in pieces for x in (p, gap)]), 16000)
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # (a new pty is 0 columns wide)
    proc = subprocess.run([sys.executable, "-m", "asrkit.bin.cli", "transcribe", "--model", MODEL, "--num_threads", "1", str(tmp_path / "long.wav")], cwd=REPO,
                          env=repo_env(), stdout=subprocess.PIPE, stderr=child, timeout=120)
    os.close(child)
    err = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    os.close(main)
    assert proc.returncode == 0 and proc.stdout.decode().startswith(str(tmp_path / "long.wav"))
    assert re.search(r"long\.wav: +\d+%\|.*\| \d+/\d+ s audio", err.decode(errors="replace")), err[-500:]


def test_a_bad_model_or_mode_is_one_line_and_status_2(bad_files, capsys):
    assert cli.main(["transcribe", "--model", str(FIXTURES / "nowhere"), *GOOD]) == 2
    assert cli.main(["transcribe", "--model", bad_files[1], *GOOD]) == 2  # a text file is no archive
    assert cli.main(["transcribe", "--model", MODEL, "--mode", "beam_of_light", *GOOD]) == 2
    assert cli.main(["transcribe", "--model", MODEL, "--chunk", "4", "--left_chunks", "-3", *GOOD]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 4 and all(line.startswith("error: ") for line in lines)
    assert "nowhere" in lines[0] and "notes.wav" in lines[1] and "beam_of_light" in lines[2]
    assert "num_decoding_left_chunks" in lines[3]


def test_the_console_script_and_the_subcommand_registry():
    assert re.search(r'"asrkit = asrkit\.bin\.cli:main"', (REPO / "setup.py").read_text())
    assert "transcribe" in cli.SUBCOMMANDS
    with pytest.raises(ValueError, match="already registered"):
        cli.register(cli.SUBCOMMANDS["transcribe"])
    proc = subprocess.run([sys.executable, "-m", "asrkit.bin.cli"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # (no subcommand: the usage, status 2, without loading torch)
    assert proc.returncode == 2 and "transcribe" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("option, message", [(["--beam_size", "0"], "beam_size must be >= 1, got 0"),
                                             (["--ctc_weight", "-5"], "ctc_weight must be in [0, 1], got -5.0")])
def test_a_bad_decoding_option_is_one_line_and_status_2_before_the_model_loads(option, message, capsys):
    assert cli.main(["transcribe", "--model", str(FIXTURES / "nowhere"), *option, *GOOD]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: {message}\n"  # (not "nowhere": the options come first)


def test_chunks_on_a_full_context_model_are_refused_with_the_reason(capsys):
    assert cli.main(["transcribe", "--model", str(FIXTURES / "offline"), "--chunk", "16", *GOOD]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: decoding_chunk_size 16: the model was trained with full context only")
