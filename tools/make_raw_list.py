#!/usr/bin/env python3
"""Kaldi-style ``wav.scp`` + ``text`` (+ optional ``segments``) -> raw ``data.list``.

Each output line is one JSON object: ``{"key", "wav", "txt", "duration"}`` (WeNet's raw
format plus the duration in seconds that the sampler plans batches with), and
``"start"``/``"end"`` (seconds) for entries cut from a longer recording by ``segments``.

* ``wav.scp`` lines are ``<key> <path>`` (read by ``asrkit.data.lists.read_wav_scp``);
  the path is the rest of the line, so paths with spaces work; relative paths are kept
  as written and resolve against the working directory, as everywhere in asrkit.  Shell pipes (``<key> cmd ... |``) are refused with an error naming
  the line: asrkit never builds a shell command from list content.
* Durations come from the audio file header (no decoding).
* Utterances without a transcript or without audio, and unreadable audio files, are
  left out, **counted per reason and reported** (``--strict`` makes them an error).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import soundfile as sf

from asrkit.data.lists import ListError, read_wav_scp  # (one wav.scp reader, pipes refused)
from asrkit.files import WriteError, atomic_write_text


def read_table(path: Path, what: str) -> dict[str, str]:
    """``<key> <rest of line>`` -> dict; duplicate keys and empty keys are errors."""
    table: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            parts = line.split(maxsplit=1)
            key, value = parts[0], (parts[1] if len(parts) > 1 else "")
            if key in table:
                raise ListError(f"{path}:{lineno}: duplicate key {key!r} in {what}")
            table[key] = value
    return table


def read_segments(path: Path) -> dict[str, tuple[str, float, float]]:
    segs = {}
    for key, rest in read_table(path, "segments").items():
        parts = rest.split()
        if len(parts) != 3:
            raise ListError(f"{path}: segment {key!r} must be '<utt> <recording> <start> <end>'")
        rec, start, end = parts[0], float(parts[1]), float(parts[2])
        if not 0 <= start < end:
            raise ListError(f"{path}: segment {key!r} has start {start} >= end {end}")
        segs[key] = (rec, start, end)
    return segs


def audio_duration(path: str) -> float:
    return float(sf.info(path).duration)


def make_entries(wav_scp: Path, text: Path, segments: Path | None, skipped: Counter,
                 log=sys.stderr) -> list[dict]:
    wavs = read_wav_scp(wav_scp)
    texts = read_table(text, "text")
    durations: dict[str, float | None] = {}

    def duration_of(path: str) -> float | None:
        if path not in durations:
            try:
                durations[path] = audio_duration(path)
            except (RuntimeError, OSError, sf.LibsndfileError) as e:
                durations[path] = None
                print(f"skip: unreadable audio {path}: {e}", file=log)
        return durations[path]

    units = read_segments(segments) if segments else {k: (k, None, None) for k in wavs}
    entries = []
    for key, (rec, start, end) in units.items():
        if key not in texts:
            skipped["no transcript"] += 1
            print(f"skip: {key}: no transcript in {text}", file=log)
            continue
        if rec not in wavs:
            skipped["no audio in wav.scp"] += 1
            print(f"skip: {key}: recording {rec} not in {wav_scp}", file=log)
            continue
        total = duration_of(wavs[rec])
        if total is None:
            skipped["unreadable audio"] += 1
            continue
        entry = {"key": key, "wav": wavs[rec], "txt": texts[key]}
        if start is not None:
            end = min(end, total)
            entry.update(start=start, end=end, duration=round(end - start, 4))
        else:
            entry["duration"] = round(total, 4)
        entries.append(entry)
    for key in texts.keys() - units.keys():
        skipped["no audio in wav.scp"] += 1
        print(f"skip: {key}: transcript without audio", file=log)
    return entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("wav_scp", type=Path)
    p.add_argument("text", type=Path)
    p.add_argument("output", type=Path, help="data.list to write")
    p.add_argument("--segments", type=Path, default=None)
    p.add_argument("--strict", action="store_true", help="any skipped utterance is an error")
    args = p.parse_args(argv)
    skipped: Counter = Counter()
    try:
        entries = make_entries(args.wav_scp, args.text, args.segments, skipped)
    except (ListError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if skipped:
        summary = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
        print(f"skipped {sum(skipped.values())} utterance(s): {summary}", file=sys.stderr)
        if args.strict:
            return 1
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.output, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
    except (WriteError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    hours = sum(e["duration"] for e in entries) / 3600
    print(f"wrote {len(entries)} entries ({hours:.2f} h) to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
