"""bench/streaming_latency.py: the test audio's word boundaries are where the bench says
they are, and a run on WeNet's U2++ model reports the latency it measured."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from bench import streaming_latency
from tests.helpers import REPO, repo_env
from tests.models.wenet_reference import FIXTURES


def test_the_first_word_ends_where_the_silence_after_it_starts():
    utterances = streaming_latency.make_utterances(3, seed=5)
    for utt in utterances:
        samples, end = utt["samples"], int(round(utt["first_end_s"] * 16000))
        assert 2 <= len(utt["words"]) <= 4 and utt["voice"].split("+")[1]
        assert np.abs(samples[:int(0.3 * 16000)]).max() < 0.02           # leading silence (noise only)
        assert np.abs(samples[end - 400:end]).max() > 0.02                 # the word's last 25 ms sound
        assert np.abs(samples[end + 10:end + int(0.15 * 16000)]).max() < 0.02  # then the gap


def test_a_run_reports_latency_compute_and_cer(tmp_path):
    out = tmp_path / "latency.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "streaming_latency.py"), "--config", "train.yaml",
                           "--checkpoint", "epoch_5.pt", "--utterances", "4", "--chunks", "8", "4", "--json", str(out)],
                          cwd=FIXTURES / "u2pp", env=repo_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["chunk"] for r in rows] == [8, 4]
    for r in rows:
        assert r["utterances"] == 4 and 0 <= r["misses"] <= 4 and r["compute_median_ms"] > 0
        assert r["misses"] == 4 or -1.0 < r["latency_median_s"] < 3.0
    assert "latency median" in proc.stdout
