"""WeNet shard lists: plain tar paths, planned from a one-time scan cached next to the list.

The list
    What WeNet's ``tools/make_shard_list.py`` writes: one tar path per line, nothing else::

        data/train/shards/shards_000000000.tar
        data/train/shards/shards_000000001.tar

    ``asrkit.data.lists.read_list`` takes a list for one when its first non-empty line is
    not a JSON object but a path ending in ``.tar`` (or a compressed tar suffix, refused
    below); every non-empty line must then be such a path (surrounding whitespace
    stripped), else :class:`ListError` names the file and line.  Relative paths are
    relative to the working directory, as in every asrkit list.

The tars
    An utterance is a transcript member ``<key>.txt`` (UTF-8, surrounding whitespace
    stripped, as WeNet does) plus an audio member ``<key>.<ext>``, ``ext`` one of
    ``asrkit.data.list_entries.AUDIO_EXTENSIONS`` (WeNet's set, case-sensitive as in WeNet);
    ``key`` is the member name up to its last dot.  The two may come in either order,
    anywhere in the tar (WeNet writes the transcript first, asrkit's
    ``tools/make_shard_list.py`` the audio first).  Utterances keep the tar order of their
    audio members; each becomes a shard :class:`ListEntry` with its audio member's
    ``offset``/``size`` (read by one seek, ``asrkit.data.audio``) and the ``duration`` of
    its audio header (soundfile on the member's bytes, rounded to microseconds as shard
    lists store it).  Tars are never extracted; member names are never used as paths.

    A member that gives no utterance is skipped, counted per reason and logged (the first
    ``SHOWN_SKIPS`` by name, then the counts) at every read of the list, cached or not:

    * ``unsafe_tar_member``: a name ``unsafe_member_name`` refuses, or a link, directory
      or device rather than a regular file;
    * ``unpaired_member``: a transcript without audio, or audio without transcript;
    * ``duplicate_member``: a second transcript, or a second audio member, of a key (the
      first one counts);
    * ``unknown_member``: a name without extension, or with neither ``txt`` nor an audio one;
    * ``unreadable_text``: a transcript that is not UTF-8;
    * ``unreadable_audio``: an audio header soundfile cannot read (damaged, or m4a/wma,
      which libsndfile does not decode);
    * ``truncated_member``: its bytes run past the end of the tar file;
    * ``damaged_tar``: bytes after the last readable header that are neither a header nor
      tar padding (the members from there on are lost).

    Refused with :class:`ListError` naming the list file and line: a URL (download the
    tars and list local paths), a compressed tar (by suffix or by its gzip/bzip2/xz/zstd
    magic: a member cannot be reached by seeking -- decompress it), a missing or unreadable
    tar, and a file that is not a tar.

The cache
    The scan reads every tar's headers, transcripts and audio headers once.  Its result
    is cached in ``<list>.index.json`` next to the list, or, when that file cannot be
    written (a read-only data folder), in
    ``<cache_dir>/shard_index/<list name>.<12 hex digits of its absolute path>.index.json``
    (``cache_dir``: the experiment folder of the tool reading the list; without one the
    index lives in memory only, with a warning).  A read uses the first of the two caches
    that holds every listed tar with its absolute path, size, mtime (ns) and inode
    unchanged.  Otherwise the tars found in neither are scanned (again) and the cache is
    rewritten atomically (``asrkit.files``) with exactly the listed tars.  Ranks reading
    one list at once each scan what is missing and write the same index atomically; the
    last rename wins.  A cache that cannot be parsed is ignored with a warning.

The digest
    :attr:`WenetShardIndex.digest` is the SHA-256 of the index written as asrkit's
    JSON-lines shard list (``asrkit.data.list_entries.shard_list_text``): exactly what the
    sampler plans from, without the stamps (which legitimately differ between copies of
    the tars).  The ranks' agreement check compares it (:func:`index_fingerprint`), and
    ``tools/convert_shard_list.py --to asrkit`` writes that very text.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import os
import re
import stat
import tarfile
from pathlib import Path
from typing import Callable, Optional

import soundfile

from asrkit.data.list_entries import (AUDIO_EXTENSIONS, COMPRESSED_TAR_SUFFIXES, ListEntry, ListError,
                                      is_wenet_shard_list, shard_entries, shard_list_text, unsafe_member_name)
from asrkit.files import WriteError, atomic_write_text

logger = logging.getLogger("asrkit.data")

CACHE_HEAD = {"format": "asrkit wenet shard index", "version": 1}
CACHE_SUFFIX = ".index.json"
SHOWN_SKIPS = 10
STAMP_KEYS = ("abs", "size", "mtime_ns", "ino")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))


@dataclasses.dataclass(frozen=True)
class WenetShardIndex:
    """A WeNet shard list read: its ``entries`` (shard members, list order then tar order),
    the ``digest`` and byte ``size`` of the index as an asrkit shard list, the cache file
    used or written (``None``: not cached), the skipped members per reason, how many
    tars this read ``scanned`` (0: all came from the cache) and, per entry, its ``places``
    in the list (``"line N (tar T)"``, for errors that name an entry)."""

    entries: list[ListEntry]
    digest: str
    size: int
    cache_path: Optional[Path]
    skipped: dict[str, int]
    scanned: int
    places: list[str]


def cache_paths(list_path: Path, cache_dir: Optional[str | Path] = None) -> list[Path]:
    """Where the index of ``list_path`` is cached, in order of preference (module docstring)."""
    paths = [list_path.with_name(list_path.name + CACHE_SUFFIX)]
    if cache_dir is not None:
        tag = hashlib.sha256(str(list_path.resolve()).encode()).hexdigest()[:12]
        paths.append(Path(cache_dir) / "shard_index" / f"{list_path.name}.{tag}{CACHE_SUFFIX}")
    return paths


def _compressed(where: str, tar: str, how: str) -> ListError:
    return ListError(f"{where}: {tar} is a compressed tar ({how}); asrkit reads tar members by seeking, which a "
                     f"compressed tar does not allow: decompress it and list the .tar")


def tar_lines(path: Path) -> list[tuple[str, str]]:
    """``(where, tar path)`` of every non-empty line of a WeNet shard list (``where`` is
    ``file:line``); :class:`ListError` for a line that is not a local, uncompressed tar path."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise ListError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        where = f"{path}:{lineno}"
        if _URL.match(text):
            raise ListError(f"{where}: {text!r} is a URL; asrkit reads local tars only: download them and list "
                            f"their paths")
        if text.lower().endswith(COMPRESSED_TAR_SUFFIXES):
            raise _compressed(where, text, "by its suffix")
        if text.startswith("{") or not text.lower().endswith(".tar"):
            raise ListError(f"{where}: a WeNet shard list holds one .tar path per line, got {text[:120]!r}")
        out.append((where, text))
    return out


def tar_stamp(tar: str, where: str) -> dict:
    """``{"abs", "size", "mtime_ns", "ino"}`` of a listed tar (:class:`ListError` when it
    cannot be found or is not a file)."""
    try:
        st = os.stat(tar)
    except FileNotFoundError:
        raise ListError(f"{where}: {tar} does not exist") from None
    except OSError as e:
        raise ListError(f"{where}: cannot read {tar}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ListError(f"{where}: {tar} is not a file")
    return {"abs": os.path.abspath(tar), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}


def _member_kind(info: tarfile.TarInfo) -> str:
    return ("a symbolic link" if info.issym() else "a hard link" if info.islnk() else
            "a directory" if info.isdir() else "a device or FIFO")


def _first_nonzero(f, start: int) -> Optional[int]:
    """Offset of the first non-zero byte of ``f`` from ``start`` on (None: only zeros)."""
    f.seek(start)
    pos = start
    for block in iter(lambda: f.read(1 << 16), b""):
        stripped = block.lstrip(b"\0")
        if stripped:
            return pos + len(block) - len(stripped)
        pos += len(block)
    return None


def scan_tar(tar: str, where: str, stamp: dict) -> dict:
    """The cache row of one tar: ``{"tar", **stamp, "members": [{"key", "txt", "duration",
    "offset", "size"}], "skipped": [[member name, reason, detail]]}`` (module docstring).
    :class:`ListError` when it cannot be read, is compressed or is not a tar."""
    texts: dict[str, str] = {}
    audio: dict[str, dict] = {}  # insertion order: tar order of the audio members
    skipped: list[list[str]] = []

    def skip(name: str, reason: str, detail: str) -> None:
        skipped.append([name, reason, detail])

    try:
        f = open(tar, "rb")
    except OSError as e:
        raise ListError(f"{where}: cannot read {tar}: {e.strerror or e}") from None
    with f:
        try:
            archive = tarfile.open(fileobj=f, mode="r:")
        except tarfile.TarError as e:
            f.seek(0)
            head = f.read(8)
            kind = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
            if kind:
                raise _compressed(where, tar, f"{kind} data") from None
            raise ListError(f"{where}: {tar} is not a tar archive ({e})") from None
        with archive:
            try:
                for info in archive:
                    _take(archive, info, stamp["size"], texts, audio, skip)
                lost_at = _first_nonzero(f, archive.offset)
            except tarfile.TarError as e:  # a member's data cut short: no header after it
                lost_at, detail = archive.offset, str(e)
            else:
                detail = "not a tar header"
    if lost_at is not None and lost_at < stamp["size"]:  # (a member cut short is already a truncated_member)
        skip(os.path.basename(tar), "damaged_tar", f"byte {lost_at} on is unreadable ({detail}): the members "
                                                   f"from there on are lost")
    members = []
    for key, row in audio.items():
        name = row.pop("name")
        if key in texts:
            members.append({"key": key, "txt": texts[key], **row})
        else:
            skip(name, "unpaired_member", f"no transcript {key}.txt")
    for key in (k for k in texts if k not in audio):
        skip(f"{key}.txt", "unpaired_member", f"no audio member {key}.<{'|'.join(AUDIO_EXTENSIONS)}>")
    return {"tar": tar, **stamp, "members": members, "skipped": skipped}


def _take(archive: tarfile.TarFile, info: tarfile.TarInfo, tar_size: int, texts: dict, audio: dict,
          skip: Callable[[str, str, str], None]) -> None:
    """Record one member in ``texts`` (key -> transcript) or ``audio`` (key -> member row),
    or ``skip`` it with its reason."""
    name = info.name
    unsafe = unsafe_member_name(name)
    if unsafe:
        return skip(name, "unsafe_tar_member", unsafe)
    if not info.isreg():
        return skip(name, "unsafe_tar_member", f"{_member_kind(info)}, not a regular file")
    if info.offset_data + info.size > tar_size:
        return skip(name, "truncated_member", f"{info.size} bytes at offset {info.offset_data} run past the end "
                                              f"of the tar ({tar_size} bytes)")
    key, dot, ext = name.rpartition(".")
    if not dot or not key or "/" in ext:
        return skip(name, "unknown_member", "no extension: neither a transcript (.txt) nor audio")
    if ext == "txt":
        if key in texts:
            return skip(name, "duplicate_member", f"a second transcript of {key!r}")
        try:
            with archive.extractfile(info) as member:
                texts[key] = member.read().decode("utf-8").strip()
        except UnicodeDecodeError as e:
            return skip(name, "unreadable_text", f"not UTF-8 ({e.reason} at byte {e.start})")
    elif ext in AUDIO_EXTENSIONS:
        if key in audio:
            return skip(name, "duplicate_member", f"a second audio member of {key!r}")
        try:
            with archive.extractfile(info) as member:
                meta = soundfile.info(member)
        except (soundfile.LibsndfileError, RuntimeError) as e:
            return skip(name, "unreadable_audio", f"soundfile cannot read its header: {e}")
        duration = round(meta.frames / meta.samplerate, 6) if meta.samplerate > 0 else 0.0
        audio[key] = {"name": name, "duration": duration, "offset": info.offset_data, "size": info.size}
    else:
        skip(name, "unknown_member", f"extension {ext!r} is neither txt nor audio ({', '.join(AUDIO_EXTENSIONS)})")


def _read_cache(path: Path) -> Optional[dict[str, dict]]:
    """The rows of a cache file by absolute tar path; None when absent or unusable (warned)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        logger.warning("%s: cannot read the shard index cache (%s); not using it", path, e)
        return None
    try:
        if not lines or json.loads(lines[0]) != CACHE_HEAD:
            raise ValueError(f"first line is not {json.dumps(CACHE_HEAD)}")
        rows = {}
        for lineno, line in enumerate(lines[1:], 2):
            row = json.loads(line)
            shard_entries(row, f"{path}:{lineno}")  # (checks the members)
            if not (isinstance(row["tar"], str) and isinstance(row["abs"], str)
                    and all(isinstance(row[k], int) for k in STAMP_KEYS[1:])
                    and all(isinstance(s, list) and len(s) == 3 for s in row["skipped"])):
                raise ValueError(f"line {lineno}: malformed tar stamp or skips")
            rows[row["abs"]] = row
        return rows
    except (ValueError, KeyError, TypeError, ListError) as e:
        logger.warning("%s: ignoring a malformed shard index cache (%s); rescanning", path, e)
        return None


def _fresh(rows: Optional[dict], stamp: dict) -> Optional[dict]:
    row = (rows or {}).get(stamp["abs"])
    return row if row is not None and all(row[k] == stamp[k] for k in STAMP_KEYS) else None


def _write_cache(paths: list[Path], rows: list[dict], list_path: Path) -> Optional[Path]:
    """Write the cache at the first of ``paths`` that can be written; None when none can."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [CACHE_HEAD, *rows])
    problems = []
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
            return path
        except (WriteError, OSError) as e:
            problems.append(str(e))
    logger.warning("%s: could not cache the shard index (%s); it is kept in memory and the tars will be scanned "
                   "again next time", list_path, "; ".join(problems) +
                   ("" if len(paths) > 1 else "; give the tool an experiment folder to cache it there"))
    return None


def _log_skips(list_path: Path, rows: list[dict]) -> dict[str, int]:
    counts = collections.Counter(s[1] for r in rows for s in r["skipped"])
    if counts:
        shown = [f"{r['tar']}: {name} ({reason}: {detail})"
                 for r in rows for name, reason, detail in r["skipped"]][:SHOWN_SKIPS]
        total = sum(counts.values())
        logger.warning("%s: %d tar member(s) skipped: %s\n  %s%s", list_path, total,
                       ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())), "\n  ".join(shown),
                       f"\n  ... and {total - len(shown)} more" if total > len(shown) else "")
    return dict(counts)


def load_wenet_shard_list(path: str | Path, cache_dir: Optional[str | Path] = None) -> WenetShardIndex:
    """Read a WeNet shard list through its cache (module docstring): scan the tars not
    cached, write the cache when anything was scanned, log the skips.  Raises
    :class:`ListError` for a malformed line or an unusable tar (naming file and line)."""
    path = Path(path)
    listed = [(where, tar, tar_stamp(tar, where)) for where, tar in tar_lines(path)]
    candidates = cache_paths(path, cache_dir)
    tables = [_read_cache(c) for c in candidates]
    used = next((c for c, t in zip(candidates, tables) if t is not None
                 and all(_fresh(t, stamp) for _, _, stamp in listed)), None)
    rows, scanned, done = [], 0, {}
    for where, tar, stamp in listed:
        row = done.get(stamp["abs"]) or next((r for t in tables if (r := _fresh(t, stamp))), None)
        if row is None:
            row = scan_tar(tar, where, stamp)
            scanned += 1
        done[stamp["abs"]] = row
        rows.append(dict(row, tar=tar))
    if used is None:
        unique = list({r["abs"]: r for r in rows}.values())
        used = _write_cache(candidates, unique, path)
    shards = [(r["tar"], shard_entries(r, r["tar"])) for r in rows]
    text = shard_list_text(shards)
    entries = [e for _, members in shards for e in members]
    places = [f"line {where.rsplit(':', 1)[1]} (tar {tar})" for (where, tar, _), (_, members) in zip(listed, shards)
              for _ in members]
    skipped = _log_skips(path, list({r["abs"]: r for r in rows}.values()))
    logger.info("%s: WeNet shard list, %d tars, %d utterances (%.2f h); %d tar(s) scanned, index %s", path,
                len(rows), len(entries), sum(e.duration for e in entries) / 3600, scanned,
                used if used is not None else "in memory only")
    return WenetShardIndex(entries, hashlib.sha256(text.encode("utf-8")).hexdigest(), len(text.encode("utf-8")),
                           used, skipped, scanned, places)


def index_fingerprint(list_path: Optional[str | Path], cache_dir: Optional[str | Path] = None) -> Optional[dict]:
    """What the ranks' agreement check compares for a WeNet shard list
    (``asrkit.train.agreement``): ``{"path" (the cache), "sha256" (the index digest),
    "bytes", "kind": "shard index"}``, reading the list through its cache (so the scan
    happens here, once, and later reads hit the cache).  ``None`` when ``list_path`` is
    not a WeNet shard list or cannot be opened (the list's own fingerprint reports that).
    A list that cannot be indexed gives ``sha256`` None and the ``error``."""
    if not list_path:
        return None
    try:
        if not is_wenet_shard_list(list_path):
            return None
    except OSError:
        return None
    try:
        index = load_wenet_shard_list(list_path, cache_dir)
    except (ValueError, OSError) as e:  # (ListError is a ValueError)
        return {"path": str(list_path), "sha256": None, "bytes": None, "error": str(e), "kind": "shard index"}
    where = str(index.cache_path) if index.cache_path is not None else f"{list_path} (index in memory)"
    return {"path": where, "sha256": index.digest, "bytes": index.size, "kind": "shard index"}
