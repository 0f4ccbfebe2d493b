"""What every kind of data list reads into, and the checks the kinds share.

:class:`ListEntry` is one utterance of any list (raw, shard, WeNet shard); :class:`ListError`
is a malformed list line.  Here too: the keys every list must have -- Kaldi tokens, each
once (:func:`key_problem`, :func:`check_keys`) --, the member checks of a shard list line
(:func:`shard_entries`), the names a tar member may not have (:func:`unsafe_member_name`),
how a WeNet shard list is told from a JSON-lines one (:func:`is_wenet_shard_list`), and
the text of an asrkit shard list (:func:`shard_list_text`).  The formats themselves are
specified in ``asrkit.data.lists`` (raw and shard lists, and :func:`asrkit.data.lists.read_list`,
which reads every kind) and ``asrkit.data.wenet_shards`` (WeNet shard lists); both import
this module, which imports neither.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Optional, Sequence

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
    missing or unreadable: loading it later is a counted skip).  ``txt`` is the
    transcript; ``None`` for an unlabelled utterance (a raw line without ``txt``, which
    only ``read_list(..., require_txt=False)`` accepts: decoding).  ``""`` is a transcript:
    an utterance labelled as saying nothing.
    """

    key: str
    txt: Optional[str]
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


# What a key may not hold: Kaldi's rule for a token (IsToken: not empty, no whitespace, no
# ASCII control character), with whitespace taken as str.split() takes it (any Unicode space:
# asrkit's and WeNet's Python readers split Kaldi lines there).  Everything else is allowed.
_UNSAFE_KEY_CHAR = re.compile(r"[\s\x00-\x1f\x7f]")


def key_problem(key: str) -> Optional[str]:
    """Why ``key`` cannot name an utterance (None when it can): empty, or a whitespace or
    ASCII control character in it -- a key is the first field of the Kaldi ``text`` lines
    decoding writes and scoring reads, so it must be one whitespace-free token (Kaldi's
    rule; any other character, ``/`` ``-`` ``.`` or non-ASCII letters, is allowed)."""
    if not key:
        return "is empty"
    bad = _UNSAFE_KEY_CHAR.search(key)
    if bad is not None:
        kind = "whitespace" if bad.group().isspace() else "a control character"
        return f"holds {kind} ({bad.group()!r} at position {bad.start()})"
    return None


def check_keys(entries: Sequence[ListEntry], places: Sequence[str], source: str | Path) -> None:
    """Raise :class:`ListError` at the first entry of ``entries`` whose key is not
    Kaldi-safe (:func:`key_problem`) or repeats an earlier entry's key.  ``places[i]`` says
    where entry ``i`` is in ``source`` (``"line 3"``); the error names the list file, the
    key and the place (both places for a repeat).  A key names one utterance everywhere --
    in results and scoring (hypothesis and reference are paired by key), in its per-key
    random draws, in a resume's plan -- so a list that repeats one is refused, never read."""
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        problem = key_problem(entry.key)
        if problem:
            raise ListError(f"{source}: {places[i]}: key {entry.key!r} {problem}; a key must be one Kaldi token "
                            f"(it is the first field of the text files decoding writes)")
        first = seen.setdefault(entry.key, i)
        if first != i:
            raise ListError(f"{source}: duplicate key {entry.key!r} at {places[first]} and {places[i]}: every "
                            f"utterance needs its own key (results and scores are matched by key)")


def checked_field(obj: dict, name: str, kinds: tuple, where: str, required: bool = True) -> Any:
    """``obj[name]`` when it is one of ``kinds`` (a bool is never an int or float); ``None``
    when it is missing or null and not ``required``; else :class:`ListError` at ``where``."""
    if name not in obj or obj[name] is None:
        if required:
            raise ListError(f"{where}: missing field {name!r}")
        return None
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise ListError(f"{where}: field {name!r} must be {wanted}, got {value!r}")
    return value


def shard_entries(obj: dict, where: str) -> list[ListEntry]:
    """The members of one shard-list line ``{"tar", "members"}`` (:class:`ListError` when malformed)."""
    tar = checked_field(obj, "tar", (str,), where)
    members = checked_field(obj, "members", (list,), where)
    out = []
    for i, m in enumerate(members):
        at = f"{where}: member {i}"
        if not isinstance(m, dict):
            raise ListError(f"{at}: expected an object, got {m!r}")
        offset = checked_field(m, "offset", (int,), at)
        size = checked_field(m, "size", (int,), at)
        duration = checked_field(m, "duration", (int, float), at)
        if offset < 512 or size < 0 or duration < 0:
            raise ListError(f"{at}: offset {offset}, size {size}, duration {duration} out of range")
        out.append(ListEntry(key=checked_field(m, "key", (str,), at), txt=checked_field(m, "txt", (str,), at),
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


def shard_list_text(shards: list[tuple[str, list[ListEntry]]]) -> str:
    """The text of a shard list (what :func:`asrkit.data.lists.write_shard_list` writes):
    one JSON line per ``(tar path, members)``, durations rounded to microseconds."""
    lines = []
    for tar, members in shards:
        rows = [{"key": m.key, "txt": m.txt, "duration": round(m.duration, 6),
                 "offset": m.offset, "size": m.size} for m in members]
        lines.append(json.dumps({"tar": tar, "members": rows}, ensure_ascii=False) + "\n")
    return "".join(lines)
