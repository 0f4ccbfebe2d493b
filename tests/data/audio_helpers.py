"""Helpers for the data-pipeline tests: tiny audio files, units and processors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.data.processors import build_sample_processor
from asrkit.text import build_tokenizer

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


def config(units: Path, **dataset_conf):
    """A validated root config with char units and the given ``dataset_conf`` keys."""
    return build(TrainConfig, {"tokenizer": "char", "tokenizer_conf": {"symbol_table_path": str(units)},
                               "dataset_conf": dataset_conf})


def tokenizer_for(units: Path):
    return build_tokenizer(config(units))


def real_setup(units: Path, *, train: bool, **dataset_conf):
    """``(dataset_conf, sample processor)`` of :func:`config` (seed 17) for real audio."""
    cfg = config(units, **dataset_conf)
    return cfg.dataset_conf, build_sample_processor(cfg.dataset_conf, build_tokenizer(cfg), train=train, seed=17)


def check_waveform_step_in_the_chain(units: Path, entries, step: str, prob: float, epoch: int, **keys) -> None:
    """A waveform augmentation switched on by ``keys`` (``speed_perturb``/``spec_aug`` off)
    changes exactly the utterances its own generator (seed 17, ``epoch``, key, ``step``) draws
    under ``prob`` -- the same again on a second call -- and never a decoding pipeline's
    features; some utterances of ``entries`` change and some do not."""
    import torch

    from asrkit.data.processors import sample_generator
    keys = {**keys, "speed_perturb": False, "spec_aug": False}
    _, proc = real_setup(units, train=True, **keys)
    _, clean = real_setup(units, train=True, speed_perturb=False, spec_aug=False)
    _, decode = real_setup(units, train=False, **keys)
    _, decode_clean = real_setup(units, train=False)
    changed = []
    for entry in entries:
        got = proc(entry, epoch)["feat"]
        assert torch.equal(got, proc(entry, epoch)["feat"])  # the same draw again
        applies = float(torch.rand((), generator=sample_generator(17, epoch, entry.key, step))) < prob
        assert applies == (not torch.equal(got, clean(entry, epoch)["feat"])), entry.key
        changed.append(applies)
        assert torch.equal(decode(entry, epoch)["feat"], decode_clean(entry, epoch)["feat"])
    assert any(changed) and not all(changed)


AUGMENT_ALL = {"speed_perturb": True, "fbank_conf": {"dither": 1.0}, "spec_aug": True,
               "spec_sub": True, "spec_trim": True}


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """An uncompressed tar of ``(name, bytes)`` regular-file members, in order, in
    tarfile's default format (what WeNet's ``tools/make_shard_list.py`` writes)."""
    import io
    import tarfile
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def wenet_pairs(rows: list[dict], audio_first: bool = False) -> list[tuple[str, bytes]]:
    """The members of raw-list ``rows`` (key, wav, txt) in WeNet's layout: ``<key>.txt``
    then ``<key>.wav`` (WeNet's order), or the audio first (asrkit's order)."""
    out = []
    for r in rows:
        pair = [(f"{r['key']}.txt", r["txt"].encode("utf-8")), (f"{r['key']}.wav", Path(r["wav"]).read_bytes())]
        out.extend(pair[::-1] if audio_first else pair)
    return out


def write_wenet_shards(rows: list[dict], tar_dir: Path, list_path: Path, per_tar: int,
                       audio_first: bool = False) -> Path:
    """A WeNet shard list of raw-list ``rows``: tars of ``per_tar`` utterances named as
    WeNet names them, and ``list_path`` holding their paths (as ``tar_dir`` was given)."""
    tars = []
    for i in range(0, len(rows), per_tar):
        tars.append(write_tar(tar_dir / f"shards_{i // per_tar:09d}.tar", wenet_pairs(rows[i:i + per_tar], audio_first)))
    list_path.parent.mkdir(parents=True, exist_ok=True)
    list_path.write_text("".join(f"{t}\n" for t in tars), encoding="utf-8")
    return list_path


def list_rows(path: Path) -> list[dict]:
    """The JSON rows of a raw list."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
