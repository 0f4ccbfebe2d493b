#!/usr/bin/env python3
"""A noisy, reverberant copy of a data directory: every utterance convolved with a room
impulse response and mixed with a noise at an SNR drawn from ``--snr_range``, with the
same functions the training pipeline uses (``asrkit.data.reverb.reverberate``,
``asrkit.data.noise.mix_at_snr``: direct-path aligned, SNR over the utterance).

    tools/make_noisy_set.py --src corpus/digits/test --dst corpus/digits/test_noisy \\
        --rir_scp corpus/noise/test/rir.scp --noise_scp corpus/noise/test/noise.scp --snr_range 2 5

``--src`` holds ``wav.scp``, ``text`` (and ``utt2spk``); ``--dst`` gets the same keys with new
16-bit wavs under ``<dst>/wav``.  Each utterance's draws (RIR, noise, SNR, noise offset)
come from a generator seeded by (``--seed``, key): deterministic, independent of order.
Idempotent: a finished ``--dst`` made with the same arguments and inputs (digests of the
lists, in ``<dst>/.done``) is kept.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from asrkit.data.noise import mix_at_snr, noise_segment
from asrkit.data.noise_lists import AudioCache, read_audio_list
from asrkit.data.reverb import reverberate


def key_rng(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([seed, int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")])


def corrupt(samples: np.ndarray, sample_rate: int, rng: np.random.Generator, rirs: AudioCache, noises: AudioCache,
            snr_range: tuple[float, float]) -> tuple[np.ndarray, dict]:
    """``samples`` reverberated and noised with the draws of ``rng`` (RIR, noise, SNR, offset)."""
    wav = torch.from_numpy(samples.astype(np.float32)).unsqueeze(0)
    rir_index, noise_index = int(rng.integers(len(rirs))), int(rng.integers(len(noises)))
    snr = float(rng.uniform(*snr_range))
    wav = reverberate(wav, rirs.get(rir_index, sample_rate))
    noise = noises.get(noise_index, sample_rate)
    wav = mix_at_snr(wav, noise_segment(noise, wav.shape[1], int(rng.integers(noise.numel()))), snr)
    return wav[0].numpy(), {"rir": rirs.items[rir_index].id, "noise": noises.items[noise_index].id, "snr_db": snr}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, type=Path)
    p.add_argument("--dst", required=True, type=Path)
    p.add_argument("--rir_scp", required=True)
    p.add_argument("--noise_scp", required=True)
    p.add_argument("--snr_range", required=True, type=float, nargs=2, metavar=("LOW", "HIGH"))
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args(argv)
    stamp = {"src": str(args.src.resolve()), "snr_range": args.snr_range, "seed": args.seed, "version": 1,
             **{name: hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] for name, path in
                (("wav.scp", args.src / "wav.scp"), ("text", args.src / "text"), ("rir_scp", args.rir_scp),
                 ("noise_scp", args.noise_scp)) if Path(path).is_file()}}
    done = args.dst / ".done"
    if done.is_file() and json.loads(done.read_text()) == stamp:
        print(f"{args.dst}: already made", file=sys.stderr)
        return 0
    rirs = AudioCache(read_audio_list(args.rir_scp, "--rir_scp"), "unreadable_rir")
    noises = AudioCache(read_audio_list(args.noise_scp, "--noise_scp"), "unreadable_noise")
    if args.dst.exists():
        shutil.rmtree(args.dst)
    (args.dst / "wav").mkdir(parents=True)
    scp, draws = [], {}
    for line in (args.src / "wav.scp").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        key, path = line.split(maxsplit=1)
        samples, sr = sf.read(path, dtype="float32")
        noisy, draws[key] = corrupt(samples, sr, key_rng(args.seed, key), rirs, noises, tuple(args.snr_range))
        out = (args.dst / "wav" / f"{key}.wav").resolve()
        sf.write(str(out), noisy, sr, subtype="PCM_16", format="WAV")
        scp.append(f"{key} {out}\n")
    (args.dst / "wav.scp").write_text("".join(scp), encoding="utf-8")
    for name in ("text", "utt2spk"):
        if (args.src / name).is_file():
            shutil.copyfile(args.src / name, args.dst / name)
    (args.dst / "draws.json").write_text(json.dumps(draws, indent=0, sort_keys=True))
    done.write_text(json.dumps(stamp))
    print(f"{args.dst}: {len(scp)} utterances reverberated and noised at {args.snr_range[0]:g}-"
          f"{args.snr_range[1]:g} dB SNR", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
