#!/usr/bin/env python3
"""Kaldi data folders from Free Spoken Digit Dataset recordings, split by speaker.

    tools/prepare_fsdd.py --corpus_dir corpus/fsdd --out data --test_speakers lucas \\
        --dev_speakers nicolas [--connected 200] [--seed 1]

``--corpus_dir`` is the dataset's layout: ``<digit>_<speaker>_<take>.wav`` (or ``.flac``, as
``corpora/fsdd/recordings.tar.gz`` unpacks) in the folder or in its ``recordings/``.  Every
speaker is in one split only: ``--test_speakers`` and ``--dev_speakers`` name theirs (either
may name none), the others train (``--train_speakers`` limits them).  Written, each with
``wav.scp``, ``text`` and ``utt2spk`` -- a split without speakers writes no folder:

* ``<out>/train``: the train speakers' isolated takes and their connected utterances;
* ``<out>/dev``, ``<out>/test``: the isolated takes (one digit each: a sentence error is a
  wrong digit);
* ``<out>/dev_connected``, ``<out>/test_connected``: the connected utterances;
* ``takes`` beside each set's connected utterances: ``<key> <file> <file> ...``, the
  recordings each is made of, in order.

A **connected utterance** is one speaker's takes in a row, as people say digit strings: 3 to
7 takes drawn without repeating a take, joined by 0.1-0.3 s of silence, with 0.1-0.3 s
before and after (uniform draws), written as 16-bit FLAC at the recordings' rate into
``<out>/<set>/audio/``.  ``--connected`` utterances are made per speaker from a generator
seeded by (``--seed``, the speaker's name), so a speaker's utterances do not depend on
which other speakers are prepared.  ``--max_takes N`` keeps each speaker's first N takes of
each digit (by take number) for every set: a small corpus for a quick run.  Transcripts are lower-case words (``zero`` ... ``nine``,
the digits recipe's words); keys ``<speaker>-<digit>-<take>`` and ``<speaker>-c<index>``.
A speaker named in two splits, one with no recordings, or a file name outside the dataset's
pattern is refused in one line (exit status 2).
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import re
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
NAME = re.compile(r"^(\d)_([a-z]+)_(\d+)\.(wav|flac)$")
TAKES_PER_UTTERANCE = (3, 7)
GAP_S = (0.1, 0.3)


class PrepareError(ValueError):
    """Input this tool cannot prepare; the message is one line."""


def find_takes(corpus_dir: Path) -> dict[str, list[tuple[str, int, Path]]]:
    """Per speaker, its ``(word, take, path)`` sorted by digit and take."""
    folder = corpus_dir / "recordings" if (corpus_dir / "recordings").is_dir() else corpus_dir
    takes: dict[str, list] = collections.defaultdict(list)
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.suffix not in (".wav", ".flac"):
            continue
        match = NAME.match(path.name)
        if not match:
            raise PrepareError(f"{path}: not a <digit>_<speaker>_<take>.wav (or .flac) name of the dataset")
        digit, speaker, take = match.group(1), match.group(2), int(match.group(3))
        takes[speaker].append((WORDS[int(digit)], take, path))
    if not takes:
        raise PrepareError(f"{corpus_dir}: no <digit>_<speaker>_<take>.wav or .flac recordings there or in recordings/")
    return {s: sorted(v, key=lambda x: (WORDS.index(x[0]), x[1])) for s, v in sorted(takes.items())}


def speaker_rng(seed: int, speaker: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{speaker}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def connected(takes: list[tuple[str, int, Path]], count: int, rng: np.random.Generator
              ) -> list[tuple[list[str], np.ndarray, int, list[Path]]]:
    """``count`` connected utterances of one speaker: ``(words, int16 samples, rate, takes)``."""
    out = []
    for _ in range(count):
        n = int(rng.integers(TAKES_PER_UTTERANCE[0], TAKES_PER_UTTERANCE[1] + 1))
        chosen = rng.choice(len(takes), size=min(n, len(takes)), replace=False)
        pieces, words, rate, paths = [], [], None, []
        for i in chosen:
            word, _, path = takes[int(i)]
            samples, r = sf.read(str(path), dtype="int16")
            if rate is not None and r != rate:
                raise PrepareError(f"{path}: {r} Hz where this speaker's other takes are {rate} Hz")
            rate = r
            pieces += [np.zeros(int(rng.uniform(*GAP_S) * r), np.int16), samples]
            words.append(word)
            paths.append(path)
        pieces.append(np.zeros(int(rng.uniform(*GAP_S) * rate), np.int16))
        out.append((words, np.concatenate(pieces), rate, paths))
    return out


def write_set(folder: Path, rows: list[tuple[str, str, str, str]]) -> None:
    """``wav.scp``, ``text``, ``utt2spk`` of ``(key, path, text, speaker)`` rows, sorted by key."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows)
    for name, column in (("wav.scp", 1), ("text", 2), ("utt2spk", 3)):
        (folder / name).write_text("".join(f"{r[0]} {r[column]}\n" for r in rows), encoding="utf-8")


def prepare(corpus_dir: Path, out: Path, test: list[str], dev: list[str], train: list[str] | None,
            count: int, seed: int, max_takes: int | None = None) -> dict[str, int]:
    """Write the sets (module docstring); utterances per set."""
    takes = find_takes(corpus_dir)
    if max_takes is not None:
        takes = {s: [t for t in v if sum(1 for u in v if u[0] == t[0] and u[1] < t[1]) < max_takes]
                 for s, v in takes.items()}
    named = test + dev + (train or [])
    twice = sorted({s for s in named if named.count(s) > 1})
    if twice:
        raise PrepareError(f"speaker(s) {', '.join(twice)} named in two splits: every speaker belongs to one split")
    unknown = sorted(set(named) - set(takes))
    if unknown:
        raise PrepareError(f"{corpus_dir}: no recordings of {', '.join(unknown)} (speakers there: {', '.join(takes)})")
    train = train if train is not None else [s for s in takes if s not in test + dev]
    sets: dict[str, list] = {"train": [], "dev": [], "dev_connected": [], "test": [], "test_connected": []}
    sources: dict[str, list[str]] = collections.defaultdict(list)
    for split, speakers in (("train", train), ("dev", dev), ("test", test)):
        for speaker in speakers:
            isolated = [(f"{speaker}-{WORDS.index(w)}-{t:02d}", str(p.resolve()), w, speaker)
                        for w, t, p in takes[speaker]]
            joined_set = "train" if split == "train" else f"{split}_connected"
            audio = out / joined_set / "audio"
            audio.mkdir(parents=True, exist_ok=True)
            joined = []
            for i, (words, samples, rate, paths) in enumerate(connected(takes[speaker], count,
                                                                        speaker_rng(seed, speaker))):
                key = f"{speaker}-c{i:04d}"
                path = audio / f"{key}.flac"
                sf.write(str(path), samples, rate, format="FLAC", subtype="PCM_16")
                joined.append((key, str(path.resolve()), " ".join(words), speaker))
                sources[joined_set].append(f"{key} {' '.join(p.name for p in paths)}\n")
            sets[split] += isolated
            sets[joined_set] += joined
    for name, rows in sets.items():
        if not rows:  # (a split without speakers: no folder, rather than an empty set a stage would trip on)
            continue
        write_set(out / name, rows)
        if sources[name]:
            (out / name / "takes").write_text("".join(sorted(sources[name])), encoding="utf-8")
    return {name: len(rows) for name, rows in sets.items() if rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus_dir", type=Path, required=True, help="FSDD recordings in the dataset's layout")
    p.add_argument("--out", type=Path, required=True, help="where data/<set> folders go")
    p.add_argument("--test_speakers", nargs="*", default=[], help="none: no test speaker (every other one trains)")
    p.add_argument("--dev_speakers", nargs="*", default=[], help="none: no dev speaker (evaluation only)")
    p.add_argument("--train_speakers", nargs="+", default=None, help="default: every other speaker")
    p.add_argument("--connected", type=int, default=200, help="connected utterances per speaker (default 200)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max_takes", type=int, default=None,
                   help="use only each speaker's first N takes of each digit (default: all)")
    args = p.parse_args(argv)
    if args.connected < 0:
        print(f"error: --connected {args.connected}: must be >= 0", file=sys.stderr)
        return 2
    if args.max_takes is not None and args.max_takes < 1:
        print(f"error: --max_takes {args.max_takes}: must be >= 1", file=sys.stderr)
        return 2
    try:
        counts = prepare(args.corpus_dir, args.out, args.test_speakers, args.dev_speakers, args.train_speakers,
                         args.connected, args.seed, args.max_takes)
    except (PrepareError, OSError, sf.LibsndfileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(" ".join(f"{name} {n}" for name, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
