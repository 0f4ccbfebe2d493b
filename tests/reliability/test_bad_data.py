"""Item 4 -- bad data at scale: a two-rank run on a list where ~6% of the entries are
missing, corrupt, truncated, empty, absurdly long or without transcript (plus a good one
at another sample rate) trains to completion; the skips are reported per reason, summed
over ranks, and every good utterance is trained on."""
from __future__ import annotations

import json
import re

import numpy as np
import soundfile

from tests.helpers import fork_ranks, train_args
from tests.data.audio_helpers import tone, write_wav

BAD = {  # key: (reason it must be skipped for, how the entry is made)
    "bad-missing": "missing_file",
    "bad-corrupt": "unreadable_audio",
    "bad-truncated": "truncated_audio",
    "bad-empty": "empty_audio",
    "bad-too-long": "too_long",
    "bad-no-text": "empty_transcript",
}


def build_list(corpus, root):
    """96 good entries (the 48 training utterances twice, one copy re-recorded at 8 kHz)
    and the 6 bad ones of BAD spread through the list."""
    rows = [json.loads(line) for line in corpus.splits["train"].data_list.read_text().splitlines()]
    good = [dict(r, key=f"{r['key']}-{copy}") for copy in "ab" for r in rows]
    samples, sr = soundfile.read(good[5]["wav"], dtype="int16")
    soundfile.write(root / "at8k.wav", samples[::2], sr // 2, subtype="PCM_16")  # a good utterance at 8 kHz
    good[5] = dict(good[5], wav=str(root / "at8k.wav"))
    (root / "corrupt.wav").write_bytes(np.random.default_rng(0).bytes(20000))
    whole = write_wav(root / "whole.wav", tone(1.0)).read_bytes()
    (root / "truncated.wav").write_bytes(whole[: len(whole) // 2])
    write_wav(root / "empty.wav", np.zeros(0, dtype=np.float32))
    write_wav(root / "long.wav", tone(120.0))  # 12000 frames > filter_conf.max_length 10240
    text = rows[0]["txt"]
    bad = [{"key": "bad-missing", "wav": str(root / "nowhere.wav"), "txt": text},
           {"key": "bad-corrupt", "wav": str(root / "corrupt.wav"), "txt": text},
           {"key": "bad-truncated", "wav": str(root / "truncated.wav"), "txt": text},
           {"key": "bad-empty", "wav": str(root / "empty.wav"), "txt": text},
           {"key": "bad-too-long", "wav": str(root / "long.wav"), "txt": text},
           {"key": "bad-no-text", "wav": rows[1]["wav"], "txt": ""}]
    entries = list(good)
    for i, b in enumerate(bad):
        entries.insert(7 + 16 * i, b)
    path = root / "mixed.list"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path, len(good), good[5]["key"]


def test_two_ranks_train_through_bad_data_and_report_it(tiny_experiment, tmp_path):
    data_list, n_good, resampled_key = build_list(tiny_experiment.corpus, tmp_path)
    config = tiny_experiment.config(tmp_path / "c.yaml", dataset_conf={"num_workers": 1})
    model_dir = tmp_path / "exp"
    argv = train_args(tiny_experiment, model_dir, config, train_list=data_list)
    results = fork_ranks([argv, argv])
    assert [code for code, _, _ in results] == [0, 0], results[0][2][-3000:] + results[1][2][-3000:]
    logs = [(model_dir / "log" / f"rank{r}.log").read_text() for r in (0, 1)]
    assert "training finished at epoch 1" in logs[0]
    # per-reason counts over both ranks; every good utterance trained (none lost with the bad ones)
    reasons = ", ".join(f"1 {reason}" for reason in sorted(BAD.values()))
    assert (f"epoch 0 data: {n_good} utterances trained, {len(BAD)} skipped as bad data ({reasons}), "
            f"over 2 rank(s)") in logs[0], re.findall(r"epoch 0 data.*", logs[0])
    # each bad key was skipped by exactly one rank, for its own reason; the 8 kHz one was resampled, not skipped
    skipped = re.findall(r"skipped (\S+) \((\w+)\):", logs[0] + logs[1])
    assert sorted(skipped) == sorted(BAD.items())
    assert resampled_key not in logs[0] + logs[1]
