#!/usr/bin/env python3
"""Synthesize a speaker-independent speech corpus with espeak-ng + sox.

The default task, ``digits``, is a TIDIGITS-style connected-digit corpus: 1-7 words
drawn from "zero oh one two ... nine".  ``sentences`` draws 4-10 word English sentences
from the grammar in ``tools/sentence_grammar.py`` (864 words).  A *speaker* is an (accent, voice variant)
pair; the variants are partitioned between the splits, so **no dev/test variant is
ever heard in train** (speaker-independent evaluation).

Each utterance gets, from a generator seeded by (seed, split, index): a speaker, a
speaking rate and pitch, a peak level, random leading/trailing silence and additive
low-level noise (white to low-passed "pink-ish") at a random SNR.  Output is 16 kHz
mono 16-bit PCM wav; ``wav.scp``, ``text`` and ``utt2spk`` are written per split.

``--single_voice N`` adds a split ``train_single``: N utterances by ONE training voice
(``en-us`` + ``--single_voice_variant``, default ``m3``, which must be a train variant)
at a fixed rate and pitch, without noise.  It is a curriculum start, not evaluation
data: a model first trained on it leaves CTC's blank plateau within a few hundred
steps, where the same model on the full ~390-voice corpus sits on it for thousands
(README, sentences recipe).

``--non_native N`` adds a split ``train_non_native``: N utterances of the task spoken with
a foreign accent -- the English words' phonemes (espeak-ng's ``en-us`` transcription) read by
the voice of another language (:data:`NON_NATIVE_LANGUAGES`, twenty of espeak-ng's, one drawn
per utterance), which realizes them with its own vowels, consonants and rhythm, as a
speaker of that language does.  Same train voice variants, rates, pitches, silence and
noise as ``train``.  Human speakers are often not native (the shipped real speakers are
four men with Greek, US, German and Belgian French accents); the native-English accents of
:data:`ACCENTS` alone leave a model deaf to that (docs/experiments/fsdd_real_speech.md).

Deterministic: the same arguments give byte-identical files (espeak-ng is
deterministic, sox runs with ``-R``, noise comes from the seeded generator).
Parallel over ``--jobs`` processes.  Idempotent: a finished split with the same
arguments (recorded in ``<out>/<split>/.done``) is not synthesized again.

Usage:
    tools/synthesize_corpus.py --out corpus/digits [--train 4000 --dev 300 --test 300]
"""
from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.sentence_grammar import sentence

SAMPLE_RATE = 16000
DEFAULT_SEED, DEFAULT_DEV_SHARE, DEFAULT_TEST_SHARE = 1, 0.15, 0.15  # the voice split of the recipes
ACCENTS = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029",
           "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc"]
# the voices that read English phonemes with a foreign accent (train_non_native): a broad set of
# espeak-ng's languages, not chosen for any speaker
NON_NATIVE_LANGUAGES = ["cs", "da", "de", "el", "es", "fi", "fr", "hi", "hu", "id",
                        "it", "ja", "nl", "pl", "pt", "ro", "ru", "sv", "tr", "vi"]
# whispered variants carry no voicing at all; they are left out of every split
EXCLUDED_VARIANTS = {"whisper", "whisperf"}
SPLIT_IDS = {"train": 0, "dev": 1, "test": 2, "train_single": 3, "train_non_native": 4}
# the single-voice split: one accent, fixed rate (words/min) and pitch, no noise
SINGLE_VOICE_ACCENT = "en-us"
SINGLE_VOICE_RATE, SINGLE_VOICE_PITCH = 170, 50

DIGIT_WORDS = ["zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def digits_text(rng: np.random.Generator) -> str:
    """1-7 connected digits, TIDIGITS style."""
    n = int(rng.integers(1, 8))
    return " ".join(DIGIT_WORDS[int(i)] for i in rng.integers(0, len(DIGIT_WORDS), size=n))


TASKS = {"digits": digits_text, "sentences": sentence}


# ----------------------------------------------------------------------------- system tools


def ensure_tools() -> None:
    """Install espeak-ng and sox with apt-get when missing and possible, else exit clearly."""
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if not missing:
        return
    can_apt = shutil.which("apt-get") is not None and hasattr(os, "geteuid") and os.geteuid() == 0
    if can_apt:
        print(f"installing {' '.join(missing)} with apt-get ...", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "espeak-ng", "sox"], check=False, env=env)
        missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
        if not missing:
            return
    sys.exit(f"error: {', '.join(missing)} not found. Install them first, e.g. "
             f"'sudo apt-get install -y espeak-ng sox' (Debian/Ubuntu) or "
             f"'brew install espeak-ng sox' (macOS), then rerun.")


def list_variants() -> list[str]:
    """espeak-ng voice variant identifiers (the part after '+', e.g. 'm3', 'Alex')."""
    out = subprocess.run(["espeak-ng", "--voices=variant"], capture_output=True, text=True, check=True)
    names = []
    for line in out.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 5 and parts[4].startswith("!v/"):
            name = parts[4][3:]
            if name not in EXCLUDED_VARIANTS:
                names.append(name)
    return sorted(set(names))


def split_variants(variants: list[str], seed: int, dev_share: float, test_share: float) -> dict[str, list[str]]:
    """Partition variants between the splits (disjoint), deterministically from ``seed``."""
    order = list(variants)
    np.random.default_rng([seed, 99]).shuffle(order)
    n_test = max(1, round(len(order) * test_share))
    n_dev = max(1, round(len(order) * dev_share))
    return {"test": sorted(order[:n_test]), "dev": sorted(order[n_test:n_test + n_dev]),
            "train": sorted(order[n_test + n_dev:])}


def default_test_voices() -> list[str]:
    """The test-split voice variants of a corpus built with the default ``--seed``,
    ``--dev_share`` and ``--test_share`` (the recipes'): voices training never heard."""
    ensure_tools()
    return split_variants(list_variants(), DEFAULT_SEED, DEFAULT_DEV_SHARE, DEFAULT_TEST_SHARE)["test"]


# ----------------------------------------------------------------------------- one utterance


def synthesize(text: str, voice: str, rate_wpm: int, pitch: int) -> np.ndarray:
    """espeak-ng -> sox (16 kHz mono) -> float32 samples in [-1, 1]."""
    espeak = subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate_wpm), "-p", str(pitch),
                             "--stdout", text], capture_output=True, check=True)
    sox = subprocess.run(["sox", "-R", "-t", "wav", "-", "-t", "wav", "-r", str(SAMPLE_RATE),
                          "-c", "1", "-b", "16", "-"], input=espeak.stdout, capture_output=True, check=True)
    audio, sr = sf.read(io.BytesIO(sox.stdout), dtype="float32")
    assert sr == SAMPLE_RATE
    return audio


def english_phonemes(text: str) -> str:
    """``text``'s phonemes as ``en-us`` speaks it, in espeak-ng's phoneme input syntax
    (``[[...]]``), for another language's voice to read."""
    out = subprocess.run(["espeak-ng", "-v", "en-us", "-q", "-x", text], capture_output=True, text=True,
                         check=True)
    return f"[[{' '.join(out.stdout.split())}]]"


def trim_silence(audio: np.ndarray, threshold: float = 1e-3) -> np.ndarray:
    loud = np.flatnonzero(np.abs(audio) > threshold)
    return audio[loud[0]:loud[-1] + 1] if loud.size else audio


def words_with_pauses(rng: np.random.Generator, voices: list[str], word_count: tuple[int, int],
                      pause_s: tuple[float, float], final_pause_s: float, lead_s: float = 0.3,
                      noise_std: float = 0.002) -> dict:
    """An utterance of digit words, each synthesized alone and trimmed to its sound, so
    every word's span is known to the sample (for timing benchmarks): ``lead_s`` of
    silence, the words with a pause uniform in ``pause_s`` after each but the last and
    ``final_pause_s`` after the last, then Gaussian noise of ``noise_std``.  Drawn from
    ``rng`` in this order: the voice (an accent of :data:`ACCENTS` + one of ``voices``),
    the rate and pitch, the number of words (``rng.integers(*word_count)``), the words,
    each pause, the noise.  Returns ``samples`` (float32, 16 kHz), ``words``, ``voice`` and
    ``spans``: each word's ``(start_s, end_s)``."""
    voice = f"{ACCENTS[int(rng.integers(len(ACCENTS)))]}+{voices[int(rng.integers(len(voices)))]}"
    rate, pitch = int(rng.integers(130, 231)), int(rng.integers(20, 81))
    words = [DIGIT_WORDS[int(rng.integers(len(DIGIT_WORDS)))] for _ in range(int(rng.integers(*word_count)))]
    at = int(lead_s * SAMPLE_RATE)
    pieces, spans = [np.zeros(at, np.float32)], []
    for i, word in enumerate(words):
        sound = trim_silence(synthesize(word, voice, rate, pitch)).astype(np.float32)
        spans.append((at / SAMPLE_RATE, (at + sound.size) / SAMPLE_RATE))
        pause = final_pause_s if i == len(words) - 1 else float(rng.uniform(*pause_s))
        pieces += [sound, np.zeros(int(pause * SAMPLE_RATE), np.float32)]
        at += sound.size + pieces[-1].size
    audio = np.concatenate(pieces)
    audio = audio + rng.normal(0.0, noise_std, audio.size).astype(np.float32)
    return {"samples": audio, "words": words, "voice": voice, "spans": spans}


def add_silence_and_noise(speech: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Scale to a random peak, pad 0.05-0.6 s of silence each side, add noise at 10-35 dB SNR."""
    speech = speech / max(float(np.max(np.abs(speech))), 1e-6) * rng.uniform(0.25, 0.85)
    lead = np.zeros(int(rng.uniform(0.05, 0.6) * SAMPLE_RATE), dtype=np.float32)
    tail = np.zeros(int(rng.uniform(0.05, 0.6) * SAMPLE_RATE), dtype=np.float32)
    signal = np.concatenate([lead, speech.astype(np.float32), tail])
    white = rng.standard_normal(signal.size)
    colour = rng.uniform(0.0, 0.95)  # one-pole low-pass: 0 = white, 0.95 = dull rumble
    kernel = colour ** np.arange(int(np.ceil(np.log(1e-6) / np.log(max(colour, 1e-3)))) + 1)
    noise = np.convolve(white, kernel)[: white.size]
    snr_db = rng.uniform(10.0, 35.0)
    speech_power = float(np.mean(speech.astype(np.float64) ** 2))
    noise *= np.sqrt(speech_power / (10 ** (snr_db / 10)) / max(float(np.mean(noise ** 2)), 1e-12))
    return np.clip(signal + noise.astype(np.float32), -1.0, 1.0)


def pad_clean(speech: np.ndarray) -> np.ndarray:
    """Scale to peak 0.5 and pad 0.1 s of digital silence each side (the single-voice split)."""
    speech = speech / max(float(np.max(np.abs(speech))), 1e-6) * 0.5
    pad = np.zeros(SAMPLE_RATE // 10, dtype=np.float32)
    return np.concatenate([pad, speech.astype(np.float32), pad])


def make_utterance(job: tuple) -> tuple[str, str, str, str]:
    """Synthesize one utterance; returns (key, speaker, text, wav path).  ``clean``
    jobs (the single-voice split) use a fixed rate and pitch and add no noise."""
    out_dir, split, index, seed, task, accents, variants, clean = job
    rng = np.random.default_rng([seed, SPLIT_IDS[split], index])
    accent = accents[int(rng.integers(len(accents)))]
    variant = variants[int(rng.integers(len(variants)))]
    text = TASKS[task](rng)
    rate = int(rng.integers(130, 231))
    pitch = int(rng.integers(20, 81))
    if clean:
        rate, pitch = SINGLE_VOICE_RATE, SINGLE_VOICE_PITCH
    speaker = f"{accent}_{variant}".replace("-", "")
    key = f"{speaker}-{split}{index:05d}"
    spoken = english_phonemes(text) if accent in NON_NATIVE_LANGUAGES else text
    speech = trim_silence(synthesize(spoken, f"{accent}+{variant}", rate, pitch))
    audio = pad_clean(speech) if clean else add_silence_and_noise(speech, rng)
    path = Path(out_dir) / "wav" / f"{key}.wav"
    sf.write(str(path), audio, SAMPLE_RATE, subtype="PCM_16", format="WAV")
    return key, speaker, text, str(path.resolve())


# ----------------------------------------------------------------------------- a split


def write_split(out_dir: Path, rows: list[tuple[str, str, str, str]]) -> None:
    rows = sorted(rows)
    (out_dir / "wav.scp").write_text("".join(f"{k} {p}\n" for k, _, _, p in rows), encoding="utf-8")
    (out_dir / "text").write_text("".join(f"{k} {t}\n" for k, _, t, _ in rows), encoding="utf-8")
    (out_dir / "utt2spk").write_text("".join(f"{k} {s}\n" for k, s, _, _ in rows), encoding="utf-8")


def build_split(out: Path, split: str, count: int, args, variants: list[str],
                accents: list[str] = ACCENTS, clean: bool = False) -> float:
    """Synthesize one split unless an identical one is already complete; returns seconds spent."""
    split_dir = out / split
    stamp = {"task": args.task, "count": count, "seed": args.seed, "accents": accents,
             "variants": variants, "version": 1}
    if clean:
        stamp.update(clean=True, rate=SINGLE_VOICE_RATE, pitch=SINGLE_VOICE_PITCH)
    done = split_dir / ".done"
    if done.is_file() and json.loads(done.read_text()) == stamp:
        print(f"{split}: {count} utterances already synthesized in {split_dir}", file=sys.stderr)
        return 0.0
    if split_dir.exists():
        shutil.rmtree(split_dir)
    (split_dir / "wav").mkdir(parents=True)
    jobs = [(str(split_dir), split, i, args.seed, args.task, accents, variants, clean) for i in range(count)]
    start = time.time()
    with mp.get_context("fork").Pool(args.jobs) as pool:
        rows = pool.map(make_utterance, jobs, chunksize=16)
    write_split(split_dir, rows)
    done.write_text(json.dumps(stamp))
    spent = time.time() - start
    print(f"{split}: {count} utterances, {len(variants)} variants x {len(accents)} accents, "
          f"{spent:.1f} s", file=sys.stderr)
    return spent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory (one sub-directory per split)")
    p.add_argument("--task", default="digits", choices=sorted(TASKS))
    p.add_argument("--train", type=int, default=4000)
    p.add_argument("--dev", type=int, default=300)
    p.add_argument("--test", type=int, default=300)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--dev_share", type=float, default=DEFAULT_DEV_SHARE, help="share of voice variants for dev")
    p.add_argument("--test_share", type=float, default=DEFAULT_TEST_SHARE, help="share of voice variants for test")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--single_voice", type=int, default=0,
                   help="also write train_single: this many clean utterances by one train voice")
    p.add_argument("--non_native", type=int, default=0,
                   help="also write train_non_native: this many utterances in foreign accents (train voices)")
    p.add_argument("--single_voice_variant", default="m3",
                   help=f"the single voice is {SINGLE_VOICE_ACCENT}+VARIANT; must be a train variant")
    args = p.parse_args(argv)

    ensure_tools()
    out = Path(args.out)
    variants = split_variants(list_variants(), args.seed, args.dev_share, args.test_share)
    if args.single_voice > 0 and args.single_voice_variant not in variants["train"]:
        p.error(f"--single_voice_variant {args.single_voice_variant!r} is not a train variant "
                f"(train: {', '.join(variants['train'][:8])}, ...); dev/test voices must stay unheard")
    total = 0.0
    for split in ("train", "dev", "test"):
        total += build_split(out, split, getattr(args, split), args, variants[split])
    if args.single_voice > 0:
        variants["train_single"] = [args.single_voice_variant]
        total += build_split(out, "train_single", args.single_voice, args, [args.single_voice_variant],
                             accents=[SINGLE_VOICE_ACCENT], clean=True)
    if args.non_native > 0:
        total += build_split(out, "train_non_native", args.non_native, args, variants["train"],
                             accents=NON_NATIVE_LANGUAGES)
    (out / "speakers.json").write_text(json.dumps(variants, indent=1))
    print(f"corpus ready in {out} ({total:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
