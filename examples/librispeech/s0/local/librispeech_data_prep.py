#!/usr/bin/env python3
"""LibriSpeech (openslr 12) -> Kaldi ``wav.scp``, ``text`` and ``utt2spk`` per set.

Expected layout (the openslr tarballs extracted; they all unpack into ``LibriSpeech/``)::

    CORPUS/LibriSpeech/<subset>/<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac
    CORPUS/LibriSpeech/<subset>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt

``CORPUS`` may also be the ``LibriSpeech`` directory itself.  Subsets are combined into
sets (each group uses the listed subsets that are present, and names the absent ones):

    OUT/train        --train_subsets  train-clean-100 train-clean-360 train-other-500
    OUT/dev          --dev_subsets    dev-clean dev-other
    OUT/test_clean   --test_subsets   test-clean test-other   (each test subset is its own
    OUT/test_other                                             set, '-' becomes '_')

Each set gets ``wav.scp`` (``<utt> <absolute flac path>``), ``text`` (``<utt> <transcript
as in trans.txt>``: upper case and apostrophes kept, as WeNet does) and ``utt2spk``
(speaker = the reader id), sorted by key; a file whose content would not change is not
rewritten.  The key is ``<speaker>-<chapter>-<utt>``, the flac's basename.  A flac
without a transcript line, a transcript line without a flac and an empty transcript are
dropped, counted and reported.  FLAC is read directly by asrkit's audio reader
(soundfile); shards re-encode it as WAV.

Errors (exit status 1, one message): the corpus or every subset of a group is missing; a
speaker or chapter directory whose name is not a number; a chapter without its
``trans.txt``; a transcript key of another chapter; a key occurring twice in one set; an
output file cannot be written.

Usage:
    local/librispeech_data_prep.py /export/data/openslr/12 data
    local/librispeech_data_prep.py --train_subsets "train-clean-100 train-clean-360" /export/data/openslr/12 data
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from asrkit.files import WriteError, atomic_write_text

TRAIN = ["train-clean-100", "train-clean-360", "train-other-500"]
DEV = ["dev-clean", "dev-other"]
TEST = ["test-clean", "test-other"]
FULL_CORPUS = {"train-clean-100": 28539, "train-clean-360": 104014, "train-other-500": 148688,
               "dev-clean": 2703, "dev-other": 2864, "test-clean": 2620, "test-other": 2939}


class PrepError(Exception):
    """A problem with the corpus that stops the preparation."""


def find_root(corpus: Path) -> Path:
    """The directory holding the subsets: ``corpus/LibriSpeech`` if present, else ``corpus``."""
    if not corpus.is_dir():
        raise PrepError(f"corpus directory not found: {corpus}")
    nested = corpus / "LibriSpeech"
    return nested if nested.is_dir() else corpus


def read_chapter(chapter_dir: Path, speaker: str, dropped: dict[str, list[str]]) -> dict[str, tuple]:
    """Key -> (flac path, text, speaker) of one chapter; mismatches go into ``dropped``."""
    chapter = chapter_dir.name
    trans = chapter_dir / f"{speaker}-{chapter}.trans.txt"
    if not trans.is_file():
        raise PrepError(f"chapter without transcript: {trans} does not exist")
    prefix = f"{speaker}-{chapter}-"
    texts: dict[str, str] = {}
    with open(trans, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            words = line.split()
            if not words:
                continue
            if not words[0].startswith(prefix):
                raise PrepError(f"{trans}:{lineno}: key {words[0]} does not belong to chapter {speaker}/{chapter}")
            if words[0] in texts:
                raise PrepError(f"{trans}:{lineno}: key {words[0]} occurs twice")
            if len(words) == 1:
                dropped["empty transcript"].append(words[0])
                continue
            texts[words[0]] = " ".join(words[1:])
    flacs = {p.stem: p for p in chapter_dir.iterdir() if p.suffix.lower() == ".flac" and p.is_file()}
    dropped["flac without transcript"].extend(k for k in flacs if k not in texts)
    dropped["transcript without flac"].extend(k for k in texts if k not in flacs)
    return {k: (os.path.abspath(flacs[k]), texts[k], speaker) for k in flacs if k in texts}


def numbered_dirs(parent: Path, what: str) -> list[Path]:
    dirs = sorted(p for p in parent.iterdir() if p.is_dir())
    for d in dirs:
        if not d.name.isdigit():
            raise PrepError(f"unexpected {what} directory {d} (LibriSpeech {what} directories are numbers)")
    return dirs


def read_subset(subset_dir: Path, dropped: dict[str, list[str]]) -> dict[str, tuple]:
    """Every utterance of one subset (``<subset>/<speaker>/<chapter>/``)."""
    utts: dict[str, tuple] = {}
    for speaker_dir in numbered_dirs(subset_dir, "speaker"):
        for chapter_dir in numbered_dirs(speaker_dir, "chapter"):
            utts.update(read_chapter(chapter_dir, speaker_dir.name, dropped))
    return utts


def write_table(path: Path, rows: dict[str, str]) -> None:
    """``<key> <value>`` lines sorted by key, written atomically; an unchanged file is left
    untouched."""
    content = "".join(f"{k} {rows[k]}\n" for k in sorted(rows))
    if path.is_file() and path.read_text(encoding="utf-8") == content:
        return
    atomic_write_text(path, content)


def examples(keys) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")


def plan_sets(root: Path, train: list[str], dev: list[str], test: list[str], log) -> dict[str, list[str]]:
    """Output set -> the present subsets it combines."""
    def present(group: str, subsets: list[str]) -> list[str]:
        have = [s for s in subsets if (root / s).is_dir()]
        if not have:
            raise PrepError(f"none of the {group} subsets {' '.join(subsets)} is under {root}")
        absent = [s for s in subsets if s not in have]
        if absent:
            print(f"note: {group} subset(s) not found under {root}, left out: {' '.join(absent)}", file=log)
        return have

    plan = {"train": present("train", train), "dev": present("dev", dev)}
    plan.update({s.replace("-", "_"): [s] for s in present("test", test)})
    return plan


def prepare(corpus: Path, out: Path, train=TRAIN, dev=DEV, test=TEST, log=sys.stderr) -> dict[str, int]:
    """Write ``out/<set>/{wav.scp,text,utt2spk}``; return the utterance count per set."""
    root = find_root(corpus)
    counts = {}
    for name, subsets in plan_sets(root, list(train), list(dev), list(test), log).items():
        utts: dict[str, tuple] = {}
        for subset in subsets:
            dropped: dict[str, list[str]] = {"flac without transcript": [], "transcript without flac": [],
                                             "empty transcript": []}
            found = read_subset(root / subset, dropped)
            twice = set(found) & set(utts)
            if twice:
                raise PrepError(f"{name}: utterance(s) {examples(twice)} occur in more than one subset")
            utts.update(found)
            full = "" if len(found) == FULL_CORPUS.get(subset) else f" (full subset: {FULL_CORPUS.get(subset)})"
            msg = f"{subset}: {len(found)} utterances{full}"
            for reason, keys in dropped.items():
                if keys:
                    msg += f"; dropped {len(keys)} {reason} ({examples(keys)})"
            print(msg, file=log)
        if not utts:
            raise PrepError(f"{name}: no utterances in {' '.join(subsets)}")
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        write_table(d / "wav.scp", {k: u[0] for k, u in utts.items()})
        write_table(d / "text", {k: u[1] for k, u in utts.items()})
        write_table(d / "utt2spk", {k: u[2] for k, u in utts.items()})
        counts[name] = len(utts)
        print(f"{name}: {len(utts)} utterances from {' + '.join(subsets)} -> {d}", file=log)
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", type=Path, help="directory holding LibriSpeech/ (or LibriSpeech itself)")
    p.add_argument("out", type=Path, help="output root: <out>/{train,dev,test_clean,test_other}/")
    for group, default in (("train", TRAIN), ("dev", DEV), ("test", TEST)):
        p.add_argument(f"--{group}_subsets", default=" ".join(default), metavar="'SUBSET ...'",
                       help=f"{group} subsets, separated by spaces or commas (default: %(default)s)")
    args = p.parse_args(argv)
    subsets = [getattr(args, f"{g}_subsets").replace(",", " ").split() for g in ("train", "dev", "test")]
    try:
        prepare(args.corpus, args.out, *subsets)
    except (PrepError, WriteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
