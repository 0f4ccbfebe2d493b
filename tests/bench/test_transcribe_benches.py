"""bench/transcribe_timestamps.py and bench/transcribe_long.py on WeNet's tiny U2++ model
and short input: the word starts the timestamp bench scores against are where the sound
starts, its scoring counts what it should, and both scripts run and report their table."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

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
        ("ctc_greedy_search", "whole"), ("ctc_greedy_search", "cut at 0.25 s pauses"),
        ("attention", "whole"), ("attention", "cut at 0.25 s pauses")]
    assert [r["default"] for r in rows] == [False, True, False, True]  # U2++: cut at 0.25 s pauses by default
    for r in rows:
        assert 6 <= r["words"] <= 12 and 0.0 <= r["on_time_pct"] <= 100.0 and r["wer"] >= 0.0
    assert "on time %" in proc.stdout


def test_the_long_file_bench_runs_one_process_per_length(tmp_path):
    out = tmp_path / "long.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "transcribe_long.py"), "--model",
                           str(FIXTURES / "u2pp"), "--minutes", "0.1", "0.3", "--utterances", "3",
                           "--long_audio_s", "3", "--gap_s", "2", "2", "--blank_threshold", "0.5",
                           "--json", str(out)], env=repo_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["minutes"] for r in rows] == [0.1, 0.3]
    for r in rows:
        assert abs(r["audio_s"] - 60 * r["minutes"]) < 0.01
        assert r["wall_s"] > 0 and r["peak_rss_mb"] >= r["rss_loaded_mb"] > 0 and r["segments"] >= 1
    # 18 s over the 3 s threshold: cut at the 2 s gaps (this weak model's silence has P(blank) 0.7-0.9)
    assert rows[1]["segments"] > 1
    assert "peak RSS MiB" in proc.stdout
