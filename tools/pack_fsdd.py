#!/usr/bin/env python3
"""Pack Free Spoken Digit Dataset recordings into the one archive asrkit ships
(``corpora/fsdd/recordings.tar.gz``; gzip takes the tar headers' padding, ~15 % of it): each ``<digit>_<speaker>_<take>.wav`` of the chosen
speakers as lossless FLAC (16-bit, the recording's own rate) under ``recordings/`` -- the
dataset's own layout, so a recipe's ``--corpus_dir`` reads the unpacked archive and a clone
of the dataset alike.  Members are sorted and carry no owner or time: packing the same
recordings again gives the same bytes.

    tools/pack_fsdd.py --recordings ../shared/fsdd/recordings --speakers george jackson lucas nicolas \\
        --out corpora/fsdd/recordings.tar.gz

A file name outside the dataset's pattern, a speaker with no recording, or audio that is not
16-bit PCM is refused in one line (exit status 2).
"""
from __future__ import annotations

import argparse
import gzip
import io
import re
import sys
import tarfile
from pathlib import Path

import soundfile as sf

NAME = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")


def flac_bytes(wav: Path) -> bytes:
    """``wav`` (16-bit PCM) as FLAC bytes, samples unchanged."""
    info = sf.info(str(wav))
    if info.subtype != "PCM_16":
        raise ValueError(f"{wav}: {info.subtype} audio, not 16-bit PCM")
    samples, rate = sf.read(str(wav), dtype="int16", always_2d=True)
    out = io.BytesIO()
    sf.write(out, samples, rate, format="FLAC", subtype="PCM_16", compression_level=1.0)  # (FLAC's -8)
    return out.getvalue()


def pack(recordings: Path, speakers: list[str], out: Path) -> int:
    """Write the archive (module docstring); the number of recordings packed."""
    chosen = {}
    for wav in sorted(recordings.glob("*.wav")):
        match = NAME.match(wav.name)
        if not match:
            raise ValueError(f"{wav}: not a <digit>_<speaker>_<take>.wav name of the dataset")
        if match.group(2) in speakers:
            chosen[wav] = match
    missing = sorted(set(speakers) - {m.group(2) for m in chosen.values()})
    if missing:
        raise ValueError(f"{recordings}: no recordings of {', '.join(missing)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    # (gzip with mtime 0 and no file name in its header: the same bytes on every run)
    try:
        with open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0,
                                                       filename="") as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for wav in chosen:
                data = flac_bytes(wav)
                member = tarfile.TarInfo(f"recordings/{wav.stem}.flac")
                member.size, member.mode, member.mtime = len(data), 0o644, 0
                tar.addfile(member, io.BytesIO(data))
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)  # (after a failure: no half archive left behind)
    return len(chosen)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recordings", type=Path, required=True, help="the dataset's recordings/ folder")
    p.add_argument("--speakers", nargs="+", required=True, help="speaker names to pack")
    p.add_argument("--out", type=Path, required=True, help="the archive to write (.tar.gz)")
    args = p.parse_args(argv)
    try:
        count = pack(args.recordings, args.speakers, args.out)
    except (ValueError, OSError, sf.LibsndfileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{count} recordings of {', '.join(args.speakers)} -> {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
