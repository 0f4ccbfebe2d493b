"""Helpers for the data-pipeline tests: tiny audio files, units and processors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile

from asrkit.config import TrainConfig, build
from asrkit.text import build_tokenizer
from tests.helpers import run_tool

SR = 16000


def tone(seconds: float, freq: float = 440.0, sr: int = SR, amp: float = 0.3, seed: int = 0) -> np.ndarray:
    """A sine tone plus a little noise (float32, [-1, 1))."""
    t = np.arange(int(seconds * sr)) / sr
    noise = np.random.default_rng(seed).normal(0, 0.01, t.shape)
    return (amp * np.sin(2 * np.pi * freq * t) + noise).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, sr: int = SR, subtype: str = "PCM_16") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), samples, sr, subtype=subtype)
    return path


def write_list(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def make_char_units(text_file: Path, out: Path) -> Path:
    run_tool("make_units.py", text_file, out)
    return out


def config(units: Path, **dataset_conf):
    """A validated root config with char units and the given ``dataset_conf`` keys."""
    return build(TrainConfig, {"tokenizer": "char", "tokenizer_conf": {"symbol_table_path": str(units)},
                               "dataset_conf": dataset_conf})


def tokenizer_for(units: Path):
    return build_tokenizer(config(units))


AUGMENT_ALL = {"speed_perturb": True, "fbank_conf": {"dither": 1.0}, "spec_aug": True,
               "spec_sub": True, "spec_trim": True}
