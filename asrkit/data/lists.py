"""Data lists: raw ``data.list`` and shard lists, flattened into :class:`ListEntry` rows.

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

A line that is not valid JSON, or lacks a required field, or has a field of the wrong
type, raises :class:`ListError` naming the file and line.  Empty lines are ignored.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Optional

import soundfile

from asrkit.io.files import atomic_write_text

logger = logging.getLogger("asrkit.data")

# Audio member extensions of a shard tar: WeNet's AUDIO_FORMAT_SETS.  Those libsndfile
# decodes (wav, flac, ogg/opus, mp3) are read; the others (m4a, wma) are counted skips.
AUDIO_EXTENSIONS = ("flac", "m4a", "mp3", "ogg", "opus", "wav", "wma")
# Suffixes of compressed tars: a member of one cannot be reached by seeking, so refused.
COMPRESSED_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")


class ListError(ValueError):
    """A data or shard list line is malformed; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class ListEntry:
    """One utterance.  Raw and shard entries of the same utterance differ only in where
    the audio comes from: ``wav`` (+ ``start``/``end``) for raw, ``tar`` + ``offset`` +
    ``size`` for a shard member.

    ``duration`` is the length in seconds of the utterance (of the segment when
    ``start``/``end`` are set); ``0.0`` when it could not be measured (the file is
    missing or unreadable: loading it later is a counted skip).
    """

    key: str
    txt: str
    duration: float
    wav: Optional[str] = None
    start: Optional[float] = None
    end: Optional[float] = None
    tar: Optional[str] = None
    offset: Optional[int] = None
    size: Optional[int] = None

    @property
    def is_shard_member(self) -> bool:
        return self.tar is not None


def _field(obj: dict, name: str, kinds: tuple, where: str, required: bool = True) -> Any:
    if name not in obj or obj[name] is None:
        if required:
            raise ListError(f"{where}: missing field {name!r}")
        return None
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise ListError(f"{where}: field {name!r} must be {wanted}, got {value!r}")
    return value


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


def _raw_entry(obj: dict, where: str) -> tuple[ListEntry, bool]:
    """Entry of a raw line, and whether its duration still has to be measured."""
    key = _field(obj, "key", (str,), where)
    wav = _field(obj, "wav", (str,), where)
    txt = _field(obj, "txt", (str,), where)
    start = _field(obj, "start", (int, float), where, required=False)
    end = _field(obj, "end", (int, float), where, required=False)
    duration = _field(obj, "duration", (int, float), where, required=False)
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


def shard_entries(obj: dict, where: str) -> list[ListEntry]:
    """The members of one shard-list line ``{"tar", "members"}`` (:class:`ListError` when malformed)."""
    tar = _field(obj, "tar", (str,), where)
    members = _field(obj, "members", (list,), where)
    out = []
    for i, m in enumerate(members):
        at = f"{where}: member {i}"
        if not isinstance(m, dict):
            raise ListError(f"{at}: expected an object, got {m!r}")
        offset = _field(m, "offset", (int,), at)
        size = _field(m, "size", (int,), at)
        duration = _field(m, "duration", (int, float), at)
        if offset < 512 or size < 0 or duration < 0:
            raise ListError(f"{at}: offset {offset}, size {size}, duration {duration} out of range")
        out.append(ListEntry(key=_field(m, "key", (str,), at), txt=_field(m, "txt", (str,), at),
                             duration=float(duration), tar=tar, offset=offset, size=size))
    return out


def unsafe_member_name(name: str) -> Optional[str]:
    """Why ``name`` must not name a tar member (None when it may): an absolute path, a
    ``..`` component, an empty component, a backslash or a control character -- names that
    would escape or confuse a directory if anyone extracted the tar."""
    if not name:
        return "empty name"
    if name.startswith("/"):
        return "absolute path"
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        return "control character"
    if "\\" in name:
        return "backslash"
    parts = name.split("/")
    if ".." in parts:
        return "'..' component"
    if "" in parts or "." in parts:
        return "empty or '.' component"
    return None


def looks_like_tar_path(line: str) -> bool:
    """Whether a stripped list line is a tar path rather than a JSON object: it does not
    start with ``{`` and ends (case-insensitively) with ``.tar`` or a compressed tar suffix."""
    return not line.startswith("{") and line.lower().endswith((".tar",) + COMPRESSED_TAR_SUFFIXES)


def is_wenet_shard_list(path: str | Path) -> bool:
    """Whether ``path`` is a WeNet shard list: its first non-empty line is a tar path
    (:func:`looks_like_tar_path`).  OSError (e.g. FileNotFoundError) when it cannot be read."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                return looks_like_tar_path(line.strip())
    return False


def read_list(path: str | Path, cache_dir: Optional[str | Path] = None) -> list[ListEntry]:
    """All entries of a raw list or shard list (detected per line: a line with ``tar``
    is a shard, one with ``key`` a raw entry), shard members flattened in tar order; or
    of a WeNet shard list (:func:`is_wenet_shard_list`), whose index is cached next to the
    list or, when that folder cannot be written, under ``cache_dir`` (the experiment
    folder; ``asrkit.data.wenet_shards.load_wenet_shard_list``).

    Missing durations are measured from the audio headers; entries whose file cannot
    be measured are kept with ``duration`` 0.0 and a warning (their load is a counted
    skip).  Raises :class:`ListError` on a malformed line, FileNotFoundError when
    ``path`` does not exist.
    """
    path = Path(path)
    if is_wenet_shard_list(path):
        from asrkit.data.wenet_shards import load_wenet_shard_list  # (it imports this module)
        return load_wenet_shard_list(path, cache_dir).entries
    entries: list[ListEntry] = []
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
                entries.extend(shard_entries(obj, where))
            elif "key" in obj:
                entry, measure = _raw_entry(obj, where)
                if measure:
                    to_measure.append(len(entries))
                entries.append(entry)
            else:
                raise ListError(f"{where}: neither a raw entry (key, wav, txt) nor a shard (tar, members)")
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
    """Write a shard list: one line per ``(tar path, members)``, members in tar order
    (each needs ``offset``, ``size`` and ``duration``).  Written atomically
    (:class:`asrkit.io.files.WriteError` on failure, the old file kept)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, shard_list_text(shards))


def shard_list_text(shards: list[tuple[str, list[ListEntry]]]) -> str:
    """The text of a shard list (what :func:`write_shard_list` writes): one JSON line per
    ``(tar path, members)``, durations rounded to microseconds."""
    lines = []
    for tar, members in shards:
        rows = [{"key": m.key, "txt": m.txt, "duration": round(m.duration, 6),
                 "offset": m.offset, "size": m.size} for m in members]
        lines.append(json.dumps({"tar": tar, "members": rows}, ensure_ascii=False) + "\n")
    return "".join(lines)


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
