"""Data lists of every kind -- raw, shard and WeNet shard lists -- read by :func:`read_list`
into :class:`ListEntry` rows.

**Raw list** -- one JSON object per line (WeNet's raw format)::

    {"key": "utt1", "wav": "/data/utt1.wav", "txt": "one two", "duration": 1.52}
    {"key": "seg7", "wav": "/data/long.wav", "txt": "nine", "start": 3.2, "end": 4.05}

``duration`` (seconds) is optional: missing ones are measured from the audio header
(``soundfile.info``, no decoding), once, when the list is read.  ``start``/``end``
(seconds) cut a segment from a longer file; its duration is ``end - start``
(``end`` absent = to the end of the file).

**Shard list** -- one JSON object per line per tar (written by
``tools/make_shard_list.py``)::

    {"tar": "shards/shard_000000.tar",
     "members": [{"key": "utt1", "txt": "one two", "duration": 1.52,
                  "offset": 1536, "size": 48684}, ...]}

``offset``/``size`` locate the bytes of member ``<key>.wav`` inside the tar, so a
member is read with one seek and one read; tars are never extracted, and member names
are never used as file-system paths.  A member whose name is unsafe
(:func:`unsafe_member_name`: absolute, ``..``, ...) or that is not a regular file (a
symbolic or hard link) is a counted ``unsafe_tar_member`` skip when read
(``asrkit.data.audio``).  Members keep tar order.  The sampler plans batches from keys
and durations alone.

**WeNet shard list** -- one tar path per line, no JSON (what WeNet's
``tools/make_shard_list.py`` writes; tars of ``<key>.txt`` + ``<key>.<audio ext>``
members, no index)::

    data/train/shards/shards_000000000.tar

A list whose first non-empty line is not a JSON object but a path ending in ``.tar`` (or
in a compressed tar suffix, which is refused) is read as one.  Its tars are scanned once
and the index cached next to the list (``asrkit.data.wenet_shards``, where the cache,
the skips and the refusals are specified); the entries are then the same shard
members an asrkit shard list of those tars gives.

**Paths** (``wav``, ``tar``): absolute, or relative to the *working directory* (the
recipe directory), as WeNet and ``tools/make_raw_list.py`` write them.

**Keys**: every entry of a list, of any kind, has its own key, a Kaldi token (not empty, no
whitespace or control character: ``asrkit.data.list_entries.key_problem``).  A key names the
utterance in the ``text`` files decoding writes, in scoring (references and hypotheses are
paired by key) and in its per-key random draws, so a list with a repeated or unsafe key is
refused when it is read (:func:`asrkit.data.list_entries.check_keys`: the error names the
file, the key and both lines) -- by training and decoding alike.

**Transcripts**: ``txt`` is required, except by ``read_list(..., require_txt=False)``
(decoding: audio nobody transcribed), where a raw line may omit it or give ``null``: the
entry is unlabelled (``txt`` None).  ``"txt": ""`` is a transcript, not a missing one.

A line that is not valid JSON, or lacks a required field, or has a field of the wrong
type, raises :class:`ListError` naming the file and line.  Empty lines are ignored.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Optional

import soundfile

from asrkit.data.list_entries import (AUDIO_EXTENSIONS, ListEntry, ListError, check_keys, checked_field,
                                      is_wenet_shard_list, shard_entries, shard_list_text, unsafe_member_name)
from asrkit.data.wenet_shards import load_wenet_shard_list
from asrkit.files import atomic_write_text

# The entry types and checks live in asrkit.data.list_entries, below both list readers (this
# module and asrkit.data.wenet_shards); they are named here too, so that callers of any list
# kind import from one place.
__all__ = ["AUDIO_EXTENSIONS", "ListEntry", "ListError", "is_wenet_shard_list", "measure_duration", "read_list",
           "read_wav_scp", "unsafe_member_name", "write_shard_list"]

logger = logging.getLogger("asrkit.data")


def measure_duration(wav: str, start: Optional[float], end: Optional[float]) -> Optional[float]:
    """Seconds of ``wav`` (or of its ``start``..``end`` part) from the header; ``None``
    when the file is missing or unreadable."""
    if end is not None:
        return end - (start or 0.0)
    try:
        total = soundfile.info(wav).duration
    except (soundfile.LibsndfileError, RuntimeError, OSError):
        return None
    return max(0.0, total - (start or 0.0))


def _raw_entry(obj: dict, where: str, require_txt: bool = True) -> tuple[ListEntry, bool]:
    """Entry of a raw line, and whether its duration still has to be measured."""
    key = checked_field(obj, "key", (str,), where)
    wav = checked_field(obj, "wav", (str,), where)
    txt = checked_field(obj, "txt", (str,), where, required=require_txt)
    start = checked_field(obj, "start", (int, float), where, required=False)
    end = checked_field(obj, "end", (int, float), where, required=False)
    duration = checked_field(obj, "duration", (int, float), where, required=False)
    if start is not None and start < 0:
        raise ListError(f"{where}: start {start} < 0")
    if end is not None and end <= (start or 0.0):
        raise ListError(f"{where}: end {end} <= start {start or 0.0}")
    if duration is not None and duration < 0:
        raise ListError(f"{where}: duration {duration} < 0")
    entry = ListEntry(key=key, txt=txt, duration=float(duration or 0.0), wav=wav,
                      start=None if start is None else float(start),
                      end=None if end is None else float(end))
    return entry, duration is None


def read_list(path: str | Path, cache_dir: Optional[str | Path] = None, *,
              require_txt: bool = True) -> list[ListEntry]:
    """All entries of a raw list or shard list (detected per line: a line with ``tar``
    is a shard, one with ``key`` a raw entry), shard members flattened in tar order; or
    of a WeNet shard list (:func:`is_wenet_shard_list`), whose index is cached next to the
    list or, when that folder cannot be written, under ``cache_dir`` (the experiment
    folder; ``asrkit.data.wenet_shards.load_wenet_shard_list``).

    ``require_txt`` False (decoding): a raw line without ``txt`` (or with ``null``) gives
    an unlabelled entry (``txt`` None) instead of an error.

    Missing durations are measured from the audio headers; entries whose file cannot
    be measured are kept with ``duration`` 0.0 and a warning (their load is a counted
    skip).  Raises :class:`ListError` on a malformed line and on a key that is repeated
    or not a Kaldi token (module docstring: naming the file, the key and the line(s)),
    FileNotFoundError when ``path`` does not exist.
    """
    path = Path(path)
    if is_wenet_shard_list(path):
        index = load_wenet_shard_list(path, cache_dir)
        check_keys(index.entries, index.places, path)
        return index.entries
    entries: list[ListEntry] = []
    places: list[str] = []  # (where each entry is, for the key checks' errors)
    to_measure: list[int] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ListError(f"{where}: not valid JSON ({e.msg}): {line.strip()[:120]!r}") from None
            if not isinstance(obj, dict):
                raise ListError(f"{where}: expected a JSON object, got {line.strip()[:120]!r}")
            if "tar" in obj:
                members = shard_entries(obj, where)
                entries.extend(members)
                places.extend(f"line {lineno} (member {i})" for i in range(len(members)))
            elif "key" in obj:
                entry, measure = _raw_entry(obj, where, require_txt)
                if measure:
                    to_measure.append(len(entries))
                entries.append(entry)
                places.append(f"line {lineno}")
            else:
                raise ListError(f"{where}: neither a raw entry (key, wav, txt) nor a shard (tar, members)")
    check_keys(entries, places, path)  # (before measuring: a refused list costs no header reads)
    unmeasured = []
    for i in to_measure:
        e = entries[i]
        seconds = measure_duration(e.wav, e.start, e.end)
        if seconds is None:
            unmeasured.append(e.key)
        else:
            entries[i] = dataclasses.replace(e, duration=seconds)
    if unmeasured:
        logger.warning("%s: %d entr%s without duration could not be measured (missing or unreadable "
                       "audio), kept with duration 0: %s", path, len(unmeasured),
                       "y" if len(unmeasured) == 1 else "ies", ", ".join(unmeasured[:10]))
    return entries


def write_shard_list(path: str | Path, shards: list[tuple[str, list[ListEntry]]]) -> None:
    """Write a shard list (:func:`asrkit.data.list_entries.shard_list_text`): one line per
    ``(tar path, members)``, members in tar order (each needs ``offset``, ``size`` and
    ``duration``).  Written atomically
    (:class:`asrkit.files.WriteError` on failure, the old file kept)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, shard_list_text(shards))


def read_wav_scp(path: str | Path) -> dict[str, str]:
    """Kaldi ``wav.scp`` (``<key> <path>``, path = rest of the line) as a dict.  Shell
    pipe entries, empty paths and duplicate keys raise :class:`ListError`."""
    path = Path(path)
    table: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.split(maxsplit=1)
            where = f"{path}:{lineno}"
            if len(parts) < 2:
                raise ListError(f"{where}: key {parts[0]!r} has no audio path")
            if parts[1].endswith("|"):
                raise ListError(f"{where}: shell pipe entries are not supported: {line!r}")
            if parts[0] in table:
                raise ListError(f"{where}: duplicate key {parts[0]!r}")
            table[parts[0]] = parts[1]
    return table
