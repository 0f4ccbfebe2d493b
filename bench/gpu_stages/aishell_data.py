"""Synthetic utterances shaped like AISHELL-1 for the GPU check's throughput stage: the
durations of AISHELL-1's training set (log-normal, mean about 4.5 s, clipped to 1-15 s),
transcripts of about 3.2 characters a second drawn from 4,230 CJK characters, and the
4,233-unit table of the AISHELL recipe (``<blank>``, ``<unk>``, the characters,
``<sos/eos>``).  The audio is coloured noise with a few drifting tones (what fbank costs
does not depend on the words); everything else -- the data list, CMVN, speed perturbation,
fbank, SpecAugment, the dynamic batches -- is the recipe's real pipeline."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from tools import compute_cmvn_stats, make_raw_list

SAMPLE_RATE = 16000
UNITS = 4233
CJK_FIRST = 0x4E00
CHARS_PER_S = 3.2
# log-normal with this sigma and the mu below has a mean of ~4.5 s once clipped to 1-15 s
DURATION_SIGMA = 0.45
DURATION_MEAN_S, DURATION_MIN_S, DURATION_MAX_S = 4.5, 1.0, 15.0


@dataclasses.dataclass(frozen=True)
class SyntheticSet:
    data_list: Path
    units: Path
    cmvn: Path
    durations: list[float]

    def describe(self) -> dict:
        d = np.asarray(self.durations)
        return {"utterances": len(d), "hours": round(float(d.sum()) / 3600, 3), "mean_s": round(float(d.mean()), 2),
                "min_s": round(float(d.min()), 2), "max_s": round(float(d.max()), 2), "units": UNITS}


def durations(count: int, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """AISHELL-1-like utterance durations in seconds (``scale`` shrinks them for a dry run)."""
    mu = np.log(DURATION_MEAN_S) - DURATION_SIGMA ** 2 / 2
    return np.clip(rng.lognormal(mu, DURATION_SIGMA, count), DURATION_MIN_S, DURATION_MAX_S) * scale


def audio(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Coloured noise plus three slowly drifting tones, peak about 0.3."""
    n = int(seconds * SAMPLE_RATE)
    noise = np.convolve(rng.standard_normal(n), np.ones(8) / 8, mode="same")
    t = np.arange(n) / SAMPLE_RATE
    tones = sum(np.sin(2 * np.pi * (f0 + 40 * np.sin(0.7 * t + k)) * t)
                for k, f0 in enumerate(rng.uniform(120, 1800, 3)))
    x = 0.6 * noise + 0.2 * tones
    return (0.3 * x / max(float(np.abs(x).max()), 1e-6)).astype(np.float32)


def write_units(path: Path) -> list[str]:
    chars = [chr(CJK_FIRST + i) for i in range(UNITS - 3)]
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(["<blank>", "<unk>", *chars, "<sos/eos>"])),
                    encoding="utf-8")
    return chars


def existing_set(work: Path) -> SyntheticSet | None:
    """The set :func:`make_set` wrote into ``work`` earlier (None when it is not complete)."""
    files = SyntheticSet(work / "data.list", work / "units.txt", work / "global_cmvn", [])
    if not all(p.is_file() for p in (files.data_list, files.units, files.cmvn)):
        return None
    return dataclasses.replace(files, durations=[json.loads(line)["duration"]
                                                 for line in files.data_list.read_text(encoding="utf-8").splitlines()])


def make_set(work: Path, count: int, seed: int = 0, duration_scale: float = 1.0, cmvn_utts: int = 64,
             config: Path | None = None, distinct: int | None = None) -> SyntheticSet:
    """Write ``count`` utterances, ``wav.scp``/``text``, the raw ``data.list`` (by
    ``tools/make_raw_list.py``), ``units.txt`` and a global CMVN of the first ``cmvn_utts``
    utterances (by ``tools/compute_cmvn_stats.py`` with ``config``'s fbank) into ``work``.
    With ``distinct``, only that many audio files are written and the utterances cycle
    over them (each its own key and transcript): the loader's work per utterance is the
    same, the files take a fraction of the time to write."""
    rng = np.random.default_rng(seed)
    wav_dir = work / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    chars = write_units(work / "units.txt")
    files = min(count, distinct or count)
    lengths = np.resize(durations(files, rng, duration_scale), count)
    scp, text = [], []
    for i, seconds in enumerate(lengths):
        key = f"synth{i:05d}"
        path = wav_dir / f"synth{i % files:05d}.wav"
        if i < files:
            sf.write(str(path), audio(float(seconds), rng), SAMPLE_RATE, subtype="PCM_16")
        n_chars = max(1, int(round(seconds / duration_scale * CHARS_PER_S * rng.uniform(0.8, 1.2))))
        scp.append(f"{key} {path}\n")
        text.append(f"{key} {''.join(chars[j] for j in rng.integers(0, len(chars), n_chars))}\n")
    (work / "wav.scp").write_text("".join(scp), encoding="utf-8")
    (work / "text").write_text("".join(text), encoding="utf-8")
    (work / "cmvn.scp").write_text("".join(scp[:cmvn_utts]), encoding="utf-8")
    data_list = work / "data.list"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if make_raw_list.main([str(work / "wav.scp"), str(work / "text"), str(data_list)]):
            raise RuntimeError("make_raw_list failed on the synthetic set")
        cmvn_args = ["--in_scp", str(work / "cmvn.scp"), "--out_cmvn", str(work / "global_cmvn"), "--num_workers", "4"]
        if compute_cmvn_stats.main(cmvn_args + (["--train_config", str(config)] if config else [])):
            raise RuntimeError("compute_cmvn_stats failed on the synthetic set")
    return SyntheticSet(data_list, work / "units.txt", work / "global_cmvn", [float(s) for s in lengths])
