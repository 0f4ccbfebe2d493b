"""tools/level_sweep.py: the gains that bring a recording to a level, the quiet device's
16-bit copy, and bad arguments in one line."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import run_tool
from tools import level_sweep


def speech_like(seconds=0.5, rate=8000):
    t = np.arange(int(seconds * rate)) / rate
    return (0.05 * np.sin(2 * np.pi * 300 * t) * np.hanning(t.size)).astype(np.float32)


@pytest.mark.parametrize("target", [-45.0, -25.0])
def test_a_dbfs_target_is_met(target):
    x = speech_like()
    gain, lowered = level_sweep.gain_for(x, str(target))
    assert not lowered and level_sweep.rms_dbfs(x * gain) == pytest.approx(target, abs=1e-6)


def test_max_puts_the_peak_at_full_scale_and_a_target_that_would_clip_is_lowered_to_it():
    x = speech_like()
    loudest, _ = level_sweep.gain_for(x, "max")
    assert float(np.max(np.abs(x * loudest))) == pytest.approx(32767 / 32768)
    gain, lowered = level_sweep.gain_for(x, "-1")  # a sine's RMS is 3 dB under its peak: -1 dBFS clips
    assert lowered and gain == loudest
    assert level_sweep.gain_for(np.zeros(100, np.float32), "-30") == (1.0, False)


def test_the_written_copies_are_16_bit_at_their_level(tmp_path):
    x = speech_like()
    sf.write(tmp_path / "a.wav", x, 8000, subtype="PCM_16")
    entries = [{"key": "a", "wav": str(tmp_path / "a.wav"), "txt": "one"}]
    data, clipped = level_sweep.write_level(entries, "-45", tmp_path / "l")
    row = json.loads(data.read_text())
    y, rate = sf.read(row["wav"], dtype="float32")
    assert rate == 8000 and sf.info(row["wav"]).subtype == "PCM_16" and clipped == 0
    assert level_sweep.rms_dbfs(y) == pytest.approx(-45, abs=0.05) and row["txt"] == "one"
    assert math.isinf(level_sweep.rms_dbfs(np.zeros(4, np.float32)))


def test_bad_levels_and_lists_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.list").write_text('{"key": "a"}\n')
    for args in (["--levels", "3"], ["--levels", "loud"], []):
        data = tmp_path / ("bad.list" if not args else "missing.list")
        status = level_sweep.main(["--config", "c.yaml", "--checkpoint", "m.pt", "--data", str(data),
                                   "--out", str(tmp_path / "o"), *args])
        err = capsys.readouterr().err
        assert status == 2 and err.strip().count("\n") == 0 and err.startswith("error: "), err
    assert run_tool("level_sweep.py", "--help").returncode == 0


@pytest.mark.xfail(strict=True, reason="issue 2/8's level target is not met yet: the real-speech fixture (volume "
                                       "0.05-2, p 0.5) is 4 SER points better at -45 dBFS and 2.5 worse at the loudest "
                                       "gain on these 200 takes (docs/experiments/fsdd_real_speech.md); strict: "
                                       "passing means a model that holds, and the mark goes")
def test_a_real_speech_model_holds_at_any_recording_level(tmp_path):
    """The level test of issue 2/8 on the real-speech fixture (trained with volume augmentation;
    lucas is a speaker it never heard): lucas's isolated takes at -45 dBFS RMS and at the
    loudest gain that clips no sample give an SER within 1 point of the takes as they are."""
    from tests.helpers import REPO, fsdd_takes
    model = REPO / "tests" / "fixtures" / "asrkit_digits" / "mixed_real"
    rows = []
    for name, samples, word in fsdd_takes("lucas", range(20)):
        path = tmp_path / name.replace(".flac", ".wav")
        sf.write(path, samples, 8000, subtype="PCM_16")
        rows.append(json.dumps({"key": name.split(".")[0], "wav": str(path), "txt": word}) + "\n")
    data = tmp_path / "lucas.list"
    data.write_text("".join(rows))
    assert level_sweep.main(["--config", str(model / "train.yaml"), "--checkpoint", str(model / "avg_3.pt"),
                             "--data", str(data), "--out", str(tmp_path / "levels"), "--levels", "-45", "max"]) == 0
    table = (tmp_path / "levels" / "levels.md").read_text()
    changes = {line.split("|")[1].strip(): float(line.split("|")[5]) for line in table.splitlines()
               if line.startswith("| ") and line.split("|")[1].strip() in ("-45", "max")}
    assert set(changes) == {"-45", "max"} and all(abs(c) <= 1.0 for c in changes.values()), table
