#!/usr/bin/env python3
"""Noise recordings and simulated room impulse responses for the synthesized recipes,
made on this machine, deterministic from ``--seed``.

    tools/make_noise_rooms.py --out corpus/noise/train --kind train [--rirs 48 --noises 48]
    tools/make_noise_rooms.py --out corpus/noise/test --kind test

Writes ``<out>/rir/*.wav`` with ``<out>/rir.scp`` and ``<out>/noise/*.wav`` with
``<out>/noise.scp`` (``id absolute-path`` lines: the lists ``dataset_conf.reverb_conf.rir_scp``
and ``noise_conf.noise_scp`` read, and ``tools/make_noisy_set.py``).

Rooms (pyroomacoustics: shoebox rooms, image-source method): dimensions and a target RT60
uniform in the kind's ranges, wall absorption from Sabine's formula
(``pyroomacoustics.inverse_sabine``); one source and one microphone uniform inside the room,
at least 0.5 m from the walls and 1 m apart.  The RIR is cut where its remaining energy
falls 60 dB below the total (Schroeder's backward integral) and written as 24-bit wav,
peak 0.9.  pyroomacoustics sums the image sources on one thread here: with more, the order of
the float sums (hence the last bits) would depend on the machine's core count.

Noise (16 kHz, ``--noise_seconds`` long, peak 0.5; the SNR is set when it is mixed):

* ``babble``: 3-6 talkers summed at equal power, each a run of sentences of
  ``tools/sentence_grammar.py`` spoken by espeak-ng with a *training* voice (the voice split
  of ``tools/synthesize_corpus.py``: dev/test voices stay unheard);
* ``tone``: one pitched tone (a fundamental of 100-1500 Hz with decaying harmonics),
  steady or beeping, with slow vibrato;
* ``chord``: a progression of 3-4-note chords (equal-tempered major/minor triads and
  sevenths, 2-4 harmonics per note), a new chord every 0.4-1.5 s;
* ``white``, ``pink``, ``brown``: Gaussian noise of power spectrum 1, 1/f, 1/f².

The two kinds share no setting -- the recipe's hard test set (``--kind test``) meets rooms
and noise types training (``--kind train``) never meets:

=====  ==================  ======================  =========================
kind   RT60 (Sabine)       room (m)                noise types
=====  ==================  ======================  =========================
train  0.15-0.6 s          3-8 x 3-7 x 2.4-3.2     babble, tone, white, pink
test   0.7-1.1 s           8-14 x 6-10 x 3-4.5     chord, brown
=====  ==================  ======================  =========================

Idempotent: a finished ``<out>`` with the same arguments (``<out>/.done``) is kept.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

SAMPLE_RATE = 16000


@dataclasses.dataclass(frozen=True)
class Kind:
    rt60: tuple[float, float]
    room: tuple[tuple[float, float], ...]
    noise_types: tuple[str, ...]


KINDS = {
    "train": Kind(rt60=(0.15, 0.6), room=((3.0, 8.0), (3.0, 7.0), (2.4, 3.2)),
                  noise_types=("babble", "tone", "white", "pink")),
    "test": Kind(rt60=(0.7, 1.1), room=((8.0, 14.0), (6.0, 10.0), (3.0, 4.5)),
                 noise_types=("chord", "brown")),
}
KIND_IDS = {"train": 0, "test": 1}


# ----------------------------------------------------------------------------- rooms


def simulate_rir(rng: np.random.Generator, kind: Kind) -> tuple[np.ndarray, dict]:
    """One room impulse response (module docstring) and its room's description."""
    import pyroomacoustics as pra
    pra.constants.set("num_threads", 1)  # the sum over image sources in one order: the same bytes on every machine
    while True:
        dims = [float(rng.uniform(lo, hi)) for lo, hi in kind.room]
        rt60 = float(rng.uniform(*kind.rt60))
        source, mic = ([float(rng.uniform(0.5, d - 0.5)) for d in dims] for _ in range(2))
        if np.linalg.norm(np.subtract(source, mic)) < 1.0:
            continue
        try:
            absorption, max_order = pra.inverse_sabine(rt60, dims)
        except ValueError:  # the RT60 cannot be reached in this room: draw another
            continue
        room = pra.ShoeBox(dims, fs=SAMPLE_RATE, materials=pra.Material(absorption), max_order=max_order)
        room.add_source(source)
        room.add_microphone(mic)
        room.compute_rir()
        rir = np.asarray(room.rir[0][0], dtype=np.float64)
        break
    energy = np.cumsum(rir[::-1] ** 2)[::-1]  # Schroeder's backward integral
    end = int(np.searchsorted(-energy, -energy[0] * 1e-6)) + 1
    rir = rir[:max(end, int(np.argmax(np.abs(rir))) + 1)]
    return (0.9 * rir / np.abs(rir).max()).astype(np.float32), {"dims": dims, "rt60": rt60, "source": source,
                                                                 "mic": mic}


# ----------------------------------------------------------------------------- noise


def coloured(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    """Gaussian noise whose power spectrum falls as ``1 / f**exponent`` (0 white, 1 pink, 2 brown)."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    f[0] = f[1]
    return np.fft.irfft(spectrum / f ** (exponent / 2), n)


def _note(freq: float, t: np.ndarray, harmonics: int, rng: np.random.Generator) -> np.ndarray:
    return sum(0.6 ** h * np.sin(2 * np.pi * freq * (h + 1) * t + rng.uniform(0, 2 * np.pi))
               for h in range(harmonics))


def tone(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(n) / SAMPLE_RATE
    f0 = float(rng.uniform(100.0, 1500.0)) * (1 + 0.01 * np.sin(2 * np.pi * rng.uniform(0.2, 6.0) * t))
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    out = sum(0.5 ** h * np.sin((h + 1) * phase) for h in range(int(rng.integers(1, 5))))
    if rng.uniform() < 0.5:  # beeping: on/off at 1-5 Hz
        out = out * (np.sin(2 * np.pi * rng.uniform(1.0, 5.0) * t) > 0)
    return out


def chords(rng: np.random.Generator, n: int) -> np.ndarray:
    out, at = np.zeros(n), 0
    while at < n:
        length = min(n - at, int(rng.uniform(0.4, 1.5) * SAMPLE_RATE))
        root = 110.0 * 2 ** (int(rng.integers(0, 24)) / 12)
        steps = [[0, 4, 7], [0, 3, 7], [0, 4, 7, 10], [0, 3, 7, 10]][int(rng.integers(4))]
        t = np.arange(length) / SAMPLE_RATE
        envelope = np.minimum(1.0, t / 0.02) * np.exp(-t * rng.uniform(0.0, 2.0))
        out[at:at + length] = envelope * sum(_note(root * 2 ** (s / 12), t, int(rng.integers(2, 5)), rng)
                                             for s in steps)
        at += length
    return out


def babble(rng: np.random.Generator, n: int, voices: list[str]) -> np.ndarray:
    from tools.sentence_grammar import sentence
    from tools.synthesize_corpus import ACCENTS, synthesize, trim_silence
    out = np.zeros(n)
    for _ in range(int(rng.integers(3, 7))):
        voice = f"{ACCENTS[int(rng.integers(len(ACCENTS)))]}+{voices[int(rng.integers(len(voices)))]}"
        rate, pitch = int(rng.integers(130, 231)), int(rng.integers(20, 81))
        talker: list[np.ndarray] = []
        while sum(p.size for p in talker) < n:
            talker += [trim_silence(synthesize(sentence(rng), voice, rate, pitch)).astype(np.float64),
                       np.zeros(int(rng.uniform(0.05, 0.4) * SAMPLE_RATE))]
        speech = np.roll(np.concatenate(talker)[:n], int(rng.integers(n)))
        out += speech / max(float(np.sqrt(np.mean(speech ** 2))), 1e-9)
    return out


def make_noise(noise_type: str, rng: np.random.Generator, n: int, voices: list[str]) -> np.ndarray:
    if noise_type == "babble":
        out = babble(rng, n, voices)
    elif noise_type == "tone":
        out = tone(rng, n)
    elif noise_type == "chord":
        out = chords(rng, n)
    else:
        out = coloured(rng, n, {"white": 0.0, "pink": 1.0, "brown": 2.0}[noise_type])
    return (0.5 * out / max(float(np.abs(out).max()), 1e-9)).astype(np.float32)


# ----------------------------------------------------------------------------- jobs


def _job(task: tuple) -> tuple[str, str]:
    what, out, kind_name, seed, index, noise_seconds, voices = task
    kind = KINDS[kind_name]
    if what == "rir":
        rng = np.random.default_rng([seed, KIND_IDS[kind_name], 0, index])
        rir, _ = simulate_rir(rng, kind)
        name, data, subtype = f"{kind_name}-rir{index:04d}", rir, "PCM_24"  # (float wavs carry a time stamp)
    else:
        noise_type = kind.noise_types[index % len(kind.noise_types)]
        rng = np.random.default_rng([seed, KIND_IDS[kind_name], 1, index])
        name = f"{kind_name}-{noise_type}{index:04d}"
        data, subtype = make_noise(noise_type, rng, int(noise_seconds * SAMPLE_RATE), voices), "PCM_16"
    path = Path(out) / what / f"{name}.wav"
    sf.write(str(path), data, SAMPLE_RATE, subtype=subtype, format="WAV")
    return name, str(path.resolve())


def training_voices(seed: int) -> list[str]:
    """The training voices of a corpus synthesized with ``--seed seed`` (the babble's talkers)."""
    from tools.synthesize_corpus import DEFAULT_DEV_SHARE, DEFAULT_TEST_SHARE, ensure_tools, list_variants, split_variants
    ensure_tools()
    return split_variants(list_variants(), seed, DEFAULT_DEV_SHARE, DEFAULT_TEST_SHARE)["train"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--kind", required=True, choices=sorted(KINDS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rirs", type=int, default=48, help="room impulse responses")
    p.add_argument("--noises", type=int, default=48, help="noise recordings (the kind's types in turn)")
    p.add_argument("--noise_seconds", type=float, default=8.0)
    p.add_argument("--corpus_seed", type=int, default=1, help="the --seed of synthesize_corpus.py (voice split)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    stamp = {"kind": args.kind, "seed": args.seed, "rirs": args.rirs, "noises": args.noises,
             "noise_seconds": args.noise_seconds, "corpus_seed": args.corpus_seed, "version": 1}
    done = args.out / ".done"
    if done.is_file() and json.loads(done.read_text()) == stamp:
        print(f"{args.out}: {args.kind} noise and rooms already made", file=sys.stderr)
        return 0
    if args.out.exists():
        shutil.rmtree(args.out)
    for sub in ("rir", "noise"):
        (args.out / sub).mkdir(parents=True)
    voices = training_voices(args.corpus_seed) if "babble" in KINDS[args.kind].noise_types else []
    tasks = [("rir", str(args.out), args.kind, args.seed, i, 0.0, voices) for i in range(args.rirs)]
    tasks += [("noise", str(args.out), args.kind, args.seed, i, args.noise_seconds, voices) for i in range(args.noises)]
    with mp.get_context("fork").Pool(args.jobs) as pool:
        rows = pool.map(_job, tasks, chunksize=1)
    for what in ("rir", "noise"):
        lines = [f"{name} {path}\n" for name, path in rows if Path(path).parent.name == what]
        (args.out / f"{what}.scp").write_text("".join(lines), encoding="utf-8")
    done.write_text(json.dumps(stamp))
    print(f"{args.out}: {args.rirs} room impulse responses, {args.noises} noises "
          f"({', '.join(KINDS[args.kind].noise_types)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
