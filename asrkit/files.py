"""Atomic file writes and file digests: the one implementation every writer in asrkit uses.

An atomic write goes to a temporary name in the target's directory
(``.<name>.tmp-<pid>``), is flushed and fsync'ed, then renamed over the target: readers
see the old file or the whole new one, never a partial one, and a crash or a full disk
mid-write leaves the old file intact (the temporary is removed, or left for
:func:`remove_temporaries` at the next start).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional

TEMP_GLOB = ".*.tmp-*"


class WriteError(RuntimeError):
    """A file could not be written; the message names it and the operating system's reason.
    The file's previous content is intact."""


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _HashingWriter:
    """File-object wrapper for ``torch.save``: hashes the bytes as they are written and
    keeps the ``OSError`` of a failed write (torch replaces it with an opaque
    ``RuntimeError`` such as "unexpected pos 832 vs 726")."""

    def __init__(self, f):
        self.f = f
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.error: Optional[OSError] = None

    def write(self, data) -> int:
        try:
            n = self.f.write(data)
        except OSError as e:
            self.error = e
            raise
        self.sha256.update(data)
        self.size += len(data)
        return n

    def flush(self) -> None:
        self.f.flush()


def _write_failure(path: Path, e: BaseException, os_error: Optional[OSError]) -> WriteError:
    cause = os_error if os_error is not None else e
    hint = ""
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        hint = " (free disk space or raise the quota/file-size limit)"
    return WriteError(f"could not write {path}: {type(cause).__name__}: {cause}{hint}")


def atomic_write(path: str | Path, write_fn: Callable) -> dict:
    """Call ``write_fn(file_object)`` on a temp file next to ``path``, fsync it, then rename
    it over ``path``.  Returns ``{"sha256", "bytes"}`` of what was written.

    Any failure (``OSError`` from the file system, or the error a serializer turns it into)
    removes the temp file, leaves ``path`` as it was and raises :class:`WriteError`
    with the operating system's reason (e.g. ``[Errno 28] No space left on device``)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    writer = None
    try:
        with open(tmp, "wb") as f:
            writer = _HashingWriter(f)
            write_fn(writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        os_error = writer.error if writer is not None else None
        if isinstance(e, OSError) or os_error is not None:
            raise _write_failure(path, e, os_error) from e
        raise
    _fsync_dir(path.parent)
    return {"sha256": writer.sha256.hexdigest(), "bytes": writer.size}


def atomic_write_bytes(path: str | Path, data: bytes) -> dict:
    """Atomically replace ``path`` with ``data``; returns ``{"sha256", "bytes"}``."""
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | Path, text: str) -> dict:
    """Atomically replace ``path`` with ``text`` (UTF-8); returns ``{"sha256", "bytes"}``."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def remove_temporaries(directory: str | Path) -> int:
    """Delete the temporaries of writers that died mid-write in ``directory`` (files, and the
    folders of :func:`temporary_folder`); returns how many."""
    import shutil
    n = 0
    for p in Path(directory).glob(TEMP_GLOB):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        n += 1
    return n


def temporary_folder(path: str | Path) -> Path:
    """The temporary name of folder ``path`` while several processes write into it
    (``.<name>.tmp-parts``: the same name in every process, unlike a file's temporary; removed
    by :func:`remove_temporaries`).  :func:`replace_folder` then renames it into place."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-parts")


def replace_folder(tmp: str | Path, path: str | Path) -> None:
    """Rename the complete folder ``tmp`` (its files written and fsync'ed by their writers) to
    ``path``; a folder already at ``path`` is moved aside first and deleted after, so a crash
    leaves the old folder or the new one under ``path`` (or, between the two renames, the old
    one under a temporary name and none at ``path``)."""
    import shutil
    tmp, path = Path(tmp), Path(path)
    old = path.with_name(f".{path.name}.tmp-old")
    if old.exists():
        shutil.rmtree(old)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class UnwritableDestination(Exception):
    """The export's destination cannot be created or written: one line naming the option,
    the path and the reason (a command refuses it with exit status 2)."""


def _probe_folder(folder: Path) -> None:
    """``OSError`` (its ``filename`` the path that failed) unless ``folder`` exists or can be
    created, with its missing parents, and a file can be created in it.  The probe creates
    them and removes them again: a refusal after it leaves nothing behind.  Trying is the
    only sure test: permission bits do not stop root, while ``/proc`` or a read-only mount
    do (``os.access`` says yes to root there)."""
    existing, missing = folder.absolute(), []
    while not os.path.lexists(existing):  # (false under a regular file, too)
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
    created = []
    try:
        for path in reversed(missing):
            path.mkdir()
            created.append(path)
        try:
            handle, probe = tempfile.mkstemp(dir=folder, prefix=".asrkit-write-probe-")
        except OSError as e:  # (it names the random file; the folder is what to fix)
            raise OSError(e.errno, e.strerror, str(folder)) from None
        os.close(handle)
        os.unlink(probe)
    finally:
        for path in reversed(created):
            with contextlib.suppress(OSError):
                path.rmdir()


def check_destination(option: str, path: str, folder: bool) -> None:
    """Refuse (:class:`UnwritableDestination`) an export destination that cannot be written,
    before any work: ``path`` given as ``option`` is the folder to write into (``folder``)
    or a file to write into its folder, which must exist or be creatable and take a new
    file (:func:`_probe_folder`); a file destination must not be a folder."""
    target = Path(path)
    try:
        if not folder and target.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
        _probe_folder(target if folder else target.parent)
    except OSError as e:
        where = f" ({e.filename})" if e.filename and e.filename != str(target) else ""
        raise UnwritableDestination(f"{option} {path}: cannot be written: {e.strerror or e}{where}") from None
