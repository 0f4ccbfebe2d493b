#!/usr/bin/env python3
"""Convert a shard list between asrkit's indexed form and WeNet's plain form.

``--to wenet``: IN is an asrkit shard list (JSON lines ``{"tar", "members"}``, written by
``tools/make_shard_list.py``); OUT gets its tar paths, one per line, in list order
(WeNet's ``data.list`` for ``--data_type shard``).  asrkit's tars already hold
``<key>.wav`` + ``<key>.txt`` per utterance, which is what WeNet reads.  A WeNet list
names whole tars: members an asrkit list left out of a tar it lists come back.

``--to asrkit``: IN is a WeNet shard list (one ``.tar`` path per line); its tars are
scanned -- or their index taken from the cache next to IN, else from ``--cache_dir`` --
and OUT is that index as an asrkit shard list (``asrkit.data.wenet_shards``: members
paired by key, durations from the audio headers, skipped members counted and logged).
Its SHA-256 is the index digest the ranks' agreement check compares.

Tar paths are copied as written (relative paths stay relative to the working directory).
OUT is written atomically.  Bad input (a missing or malformed list, a list of the other
kind, an unusable tar) is one ``error:`` line and exit status 2; an OUT that cannot be
written, one line and status 1.

Usage:
    tools/convert_shard_list.py --to wenet data/train/data.shards.list data/train/data.wenet.list
    tools/convert_shard_list.py --to asrkit data/train/data.list data/train/data.shards.list
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from asrkit.data.lists import ListError, is_wenet_shard_list, read_list, write_shard_list
from asrkit.data.wenet_shards import load_wenet_shard_list
from asrkit.files import WriteError, atomic_write_text


def to_wenet(src: Path, dst: Path) -> str:
    if is_wenet_shard_list(src):
        raise ListError(f"{src} is already a WeNet shard list (one tar path per line)")
    entries = read_list(src)
    if any(not e.is_shard_member for e in entries):
        raise ListError(f"{src} is a raw list, not a shard list: pack it first with tools/make_shard_list.py")
    tars = list(dict.fromkeys(e.tar for e in entries))
    atomic_write_text(dst, "".join(f"{t}\n" for t in tars))
    return f"wrote {len(tars)} tar paths ({len(entries)} utterances) to {dst}"


def to_asrkit(src: Path, dst: Path, cache_dir) -> str:
    if not is_wenet_shard_list(src):
        raise ListError(f"{src} is not a WeNet shard list (its first line is not a .tar path)")
    index = load_wenet_shard_list(src, cache_dir)
    shards: dict[str, list] = {}
    for e in index.entries:
        shards.setdefault(e.tar, []).append(e)
    write_shard_list(dst, list(shards.items()))
    skipped = sum(index.skipped.values())
    return (f"wrote {len(shards)} tars, {len(index.entries)} utterances to {dst} (sha256 {index.digest[:12]}); "
            f"{skipped} member(s) skipped")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--to", required=True, choices=["wenet", "asrkit"], help="the form to write")
    p.add_argument("--cache_dir", default=None,
                   help="--to asrkit: where to cache the index when IN's folder cannot be written")
    p.add_argument("src", type=Path, help="shard list to read")
    p.add_argument("dst", type=Path, help="shard list to write")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        if args.to == "wenet":
            done = to_wenet(args.src, args.dst)
        else:
            done = to_asrkit(args.src, args.dst, args.cache_dir)
    except (ListError, FileNotFoundError, UnicodeDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except WriteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    logging.info("%s", done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
