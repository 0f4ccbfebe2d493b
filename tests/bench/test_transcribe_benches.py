"""bench/transcribe_timestamps.py and bench/transcribe_long.py on WeNet's tiny U2++ model
and short input: the word starts the timestamp bench scores against are where the sound
starts, its scoring counts what it should, and both scripts run and report their table."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from asrkit.transcribe import TokenTime, Transcript, WordTime
from bench import transcribe_timestamps
from tests.helpers import REPO, repo_env
from tests.models.wenet_reference import FIXTURES


def test_word_starts_are_where_each_sound_starts():
    for utt in transcribe_timestamps.make_utterances(2, seed=4):
        samples, starts = utt["samples"], [int(round(s * 16000)) for s in utt["starts"]]
        assert 3 <= len(utt["words"]) == len(starts) <= 6 and starts[0] == int(0.3 * 16000)
        for start, following in zip(starts, starts[1:] + [samples.size]):
            assert np.abs(samples[start - 800:start - 10]).max() < 0.02   # silence (noise only) before
            assert np.abs(samples[start:start + 800]).max() > 0.02        # the word's first 50 ms sound
            assert following - start > int(0.3 * 16000)                   # a word and a gap of >= 0.3 s


def transcript(words: list[tuple[str, float]]) -> Transcript:
    spans = [WordTime(w, s, s + 0.2) for w, s in words]
    tokens = [TokenTime(ch, s, s + 0.04) for w, s in words for ch in w]
    return Transcript(" ".join(w for w, _ in words), [t.token for t in tokens], tokens, spans, [], 3.0, "x")


def test_scoring_counts_words_on_time():
    score_mode = transcribe_timestamps.score_mode
    utts = [{"words": ["one", "two", "three", "four"], "starts": [0.3, 1.0, 2.0, 3.0]}]
    # on time, a substitute 0.3 s late, on time, deleted
    row = score_mode([transcript([("one", 0.35), ("tew", 1.3), ("three", 2.05)])], utts, 0.2)
    assert row["words"] == 4 and row["on_time_pct"] == 50.0 and row["wer"] == 50.0
    assert row["on_time_correct_pct"] == 100.0  # both correct words are on time
    assert abs(row["median_abs_error_s"] - 0.05) < 1e-9 and abs(row["p90_abs_error_s"] - 0.05) < 1e-9
    # two words merged into one (a missing word boundary): by first character both are on time
    row = score_mode([transcript([("onetwo", 0.3)]), ], [{"words": ["one", "two"], "starts": [0.3, 0.3]}], 0.2)
    assert row["on_time_first_char_pct"] == 100.0 and row["on_time_pct"] == 50.0
    row = score_mode([transcript([("onedwo", 0.3)]), ], [{"words": ["one", "two"], "starts": [0.3, 0.3]}], 0.2)
    assert row["on_time_first_char_pct"] == 50.0  # "t" is not on time as a "d"


def test_the_timestamp_bench_runs_and_reports_every_mode(tmp_path):
    out = tmp_path / "ts.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "transcribe_timestamps.py"), "--model",
                           str(FIXTURES / "u2pp"), "--utterances", "2", "--modes", "ctc_greedy_search", "attention",
                           "--json", str(out)], env=repo_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [(r["mode"], r["decoding"]) for r in rows] == [
        ("ctc_greedy_search", "whole"), ("ctc_greedy_search", "cut at pauses (VAD)"),
        ("attention", "whole"), ("attention", "cut at pauses (VAD)")]
    assert [r["default"] for r in rows] == [False, True, False, True]
    for r in rows:
        assert 6 <= r["words"] <= 12 and 0.0 <= r["on_time_pct"] <= 100.0 and r["wer"] >= 0.0
    assert "on time %" in proc.stdout


@pytest.mark.heavy  # (11-16 s; long files against their parts are the suite's tests/transcribe/
# test_long_recordings.py; last output: docs/experiments/heavy_tests.md)
def test_the_long_file_bench_reports_long_files_against_their_parts_and_non_speech(tmp_path):
    out = tmp_path / "long.json"
    proc = subprocess.run([sys.executable, "-m", "bench.transcribe_long", "--model", str(FIXTURES / "u2pp"),
                           "--minutes", "0.15", "--gaps", "0.2-0.5", "0", "--utterances", "3", "--non_speech",
                           "--mode", "ctc_greedy_search", "--json", str(out)], cwd=REPO, env=repo_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [(r["gap"], r["minutes"]) for r in report["long"]] == [("0.2-0.5", 0.15), ("0", 0.15)]
    for r in report["long"]:
        assert abs(r["audio_s"] - 60 * r["minutes"]) < 0.01 and r["utterances"] >= 2
        assert r["wall_s"] > 0 and r["peak_rss_mb"] >= r["rss_loaded_mb"] > 0
        assert r["segments"] >= 1 and r["cer"] >= 0 and r["parts_cer"] >= 0
    assert report["long"][0]["segments"] >= report["long"][0]["utterances"]  # a cut in every 0.2-0.5 s pause
    assert len(report["non_speech"]) == 15 and all(r["text"] == "" for r in report["non_speech"])
    assert "parts CER %" in proc.stdout and "| C major chord -10 dBFS |" in proc.stdout


def test_the_long_files_hold_whole_utterances_with_the_pauses_asked_for():
    from bench import transcribe_long
    utts = [np.full(16000, 0.5, np.float32), np.full(8000, 0.5, np.float32)]
    audio, order = transcribe_long.build_file(utts, 10.0, (0.2, 0.5), seed=1)
    assert audio.size == 160000 and order[:4] == [0, 1, 0, 1]
    loud = np.flatnonzero(np.abs(audio) > 0.1)
    runs = np.split(loud, np.flatnonzero(np.diff(loud) > 1) + 1)
    assert [r.size for r in runs] == [[16000, 8000][i % 2] for i in order]
    gaps = [(b[0] - a[-1] - 1) / 16000 for a, b in zip(runs, runs[1:])]
    assert all(0.2 <= g <= 0.5 for g in gaps)
    assert transcribe_long.parse_gap("0.2-0.5") == (0.2, 0.5) and transcribe_long.parse_gap("0") == (0.0, 0.0)


def test_the_detector_comparison_scores_what_segmentation_needs():
    from bench import vad_choice
    silence = ("silence", np.zeros(16000, np.float32))
    utt = {"samples": np.zeros(3 * 16000, np.float32), "spans": [(0.2, 0.5), (1.0, 1.4), (1.45, 2.0)]}

    def frames(samples):  # speech exactly where the words are, 10 ms frames
        t = np.arange(samples.size // 160) * 0.01
        return np.array([any(a <= x < b for a, b in utt["spans"]) for x in t]) if samples is utt["samples"] \
            else np.zeros(t.size, bool), 0.01
    r = vad_choice.score(frames, [silence], [utt])
    # every word found; of the two pauses only the 0.5 s one holds 0.1 s of non-speech
    assert r == {"non_speech_frames_pct": 0.0, "files_with_speech": 0, "files": 1, "words_pct": 100.0,
                 "pauses_pct": 50.0}
