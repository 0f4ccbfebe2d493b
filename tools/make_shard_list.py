#!/usr/bin/env python3
"""Pack a raw ``data.list`` into tar shards and write the shard list.

Each tar holds, per utterance in list order, ``<key>.wav`` then ``<key>.txt``
(transcript, UTF-8).  A whole WAV file is copied byte for byte; a segment
(``start``/``end``) or a non-WAV file is re-encoded as WAV without changing a sample
(same integer subtype, or float).  Reading a member therefore gives exactly the
samples the raw entry gives.

The shard list has one JSON line per tar::

    {"tar": "<shards_dir>/<prefix>_000000.tar",
     "members": [{"key", "txt", "duration", "offset", "size"}, ...]}

where ``offset``/``size`` locate the ``<key>.wav`` data inside the tar and
``duration`` is measured from the decoded audio.  Tar paths are written as
``shards_dir`` was given (relative = relative to the working directory, like every
asrkit list).

A list that repeats a key or has a key that is not a Kaldi token (empty, whitespace or a
control character: ``asrkit.data.lists.read_list``), or a key that cannot safely name a tar
member (absolute, with a ``..`` component, a backslash:
``asrkit.data.lists.unsafe_member_name``), is refused (exit status 2, the file, key and line
named) before anything is written.  Utterances whose audio is missing, unreadable,
truncated or empty are left out, each logged with its reason, and counted in a summary.
Shards are written in parallel (``--num_threads`` processes), each atomically (``asrkit.files.atomic_write``: a
temporary name renamed when complete).  A shard or the list that cannot be written (disk
full, no permission) ends the run with a one-line ``error:`` and exit status 1.

Usage:
    tools/make_shard_list.py --num_utts_per_shard 1000 --num_threads 2 \\
        data/train/data.list data/train/shards data/train/data.shards.list
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import logging
import multiprocessing
import sys
import tarfile
from pathlib import Path

import soundfile

from asrkit.data.audio import DataFault, load_audio
from asrkit.data.lists import ListEntry, ListError, read_list, unsafe_member_name, write_shard_list
from asrkit.data.processors import Skip, SkipStats
from asrkit.files import WriteError, atomic_write

# soundfile read dtype that holds each WAV subtype without loss
_EXACT_DTYPE = {"PCM_U8": "int16", "PCM_16": "int16", "PCM_24": "int32", "PCM_32": "int32",
                "FLOAT": "float32", "DOUBLE": "float64"}


def wav_payload(entry: ListEntry) -> bytes:
    """The ``<key>.wav`` bytes of a raw entry: the file itself when it is a whole WAV
    file, else the (segment of the) audio re-encoded as WAV with no sample changed."""
    with soundfile.SoundFile(entry.wav) as f:
        whole_wav = f.format == "WAV" and entry.start is None and entry.end is None
        if not whole_wav:
            subtype = f.subtype if f.subtype in _EXACT_DTYPE else "FLOAT"
            sr = f.samplerate
            first = 0 if entry.start is None else int(round(entry.start * sr))
            last = f.frames if entry.end is None else min(f.frames, int(round(entry.end * sr)))
            f.seek(first)
            data = f.read(last - first, dtype=_EXACT_DTYPE[subtype], always_2d=True)
    if whole_wav:
        return Path(entry.wav).read_bytes()
    buf = io.BytesIO()
    soundfile.write(buf, data, sr, subtype=subtype, format="WAV")
    return buf.getvalue()


def write_shard(job: tuple[str, list[ListEntry]]) -> tuple[str, list[ListEntry], list[Skip]]:
    """Write one tar (atomically: :class:`WriteError` on failure, an old tar of that name
    kept); return its path, its members (with offset/size/duration) and the skipped entries."""
    tar_path, entries = job
    kept, skipped = [], []

    def write_tar(f) -> None:
        # stream mode ("w|"): the plain "w" mode calls tell(), which atomic_write's
        # write-only file object does not have; the bytes written are the same
        with tarfile.open(fileobj=f, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for entry in entries:
                try:
                    wav, sr = load_audio(entry)  # validates: missing/unreadable/truncated/empty
                except DataFault as fault:
                    skipped.append(Skip(entry.key, fault.reason, fault.detail))
                    continue
                for name, payload in ((f"{entry.key}.wav", wav_payload(entry)),
                                      (f"{entry.key}.txt", entry.txt.encode("utf-8"))):
                    info = tarfile.TarInfo(name)
                    info.size = len(payload)
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(payload))
                kept.append(dataclasses.replace(entry, duration=wav.shape[1] / sr))

    atomic_write(tar_path, write_tar)
    with tarfile.open(tar_path, "r") as tar:
        located = {m.name: m for m in tar.getmembers()}
    members = []
    for entry in kept:
        m = located[f"{entry.key}.wav"]
        members.append(ListEntry(key=entry.key, txt=entry.txt, duration=entry.duration,
                                 tar=tar_path, offset=m.offset_data, size=m.size))
    return tar_path, members, skipped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_list", type=Path, help="raw data.list")
    p.add_argument("shards_dir", help="directory for the tars")
    p.add_argument("shard_list", type=Path, help="shard list to write")
    p.add_argument("--num_utts_per_shard", type=int, default=1000)
    p.add_argument("--num_threads", type=int, default=1, help="parallel processes")
    p.add_argument("--prefix", default="shards")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.num_utts_per_shard < 1 or args.num_threads < 1:
        p.error("--num_utts_per_shard and --num_threads must be >= 1")

    try:
        entries = read_list(args.data_list)  # (its keys checked there: each once, each a Kaldi token)
    except (ListError, OSError) as e:
        p.error(str(e))
    if any(e.is_shard_member for e in entries):
        p.error(f"{args.data_list} is already a shard list")
    for e in entries:
        unsafe = unsafe_member_name(f"{e.key}.wav")
        if unsafe:
            p.error(f"{args.data_list}: key {e.key!r} cannot name a tar member ({unsafe}); nothing was written")
    Path(args.shards_dir).mkdir(parents=True, exist_ok=True)
    n = args.num_utts_per_shard
    jobs = [(str(Path(args.shards_dir) / f"{args.prefix}_{i // n:06d}.tar"), entries[i:i + n])
            for i in range(0, len(entries), n)]
    stats = SkipStats()
    shards = []
    try:
        with multiprocessing.Pool(min(args.num_threads, max(1, len(jobs)))) as pool:
            for tar_path, members, skipped in pool.imap(write_shard, jobs):
                for skip in skipped:
                    stats.add(skip)
                shards.append((tar_path, members))
        write_shard_list(args.shard_list, shards)
    except WriteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    kept = sum(len(m) for _, m in shards)
    hours = sum(e.duration for _, m in shards for e in m) / 3600
    logging.info("wrote %d shards, %d utterances (%.2f h) to %s; %s", len(shards), kept, hours,
                 args.shard_list, stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
