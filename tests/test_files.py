"""asrkit.files: the one atomic writer -- the whole new file or the old one, never a part,
no temporary left behind -- and the digests it reports."""
from __future__ import annotations

import errno
import hashlib

import pytest

from asrkit.files import TEMP_GLOB, WriteError, atomic_write, atomic_write_text, file_digest, remove_temporaries


def test_a_write_replaces_the_file_and_reports_what_it_wrote(tmp_path):
    path = tmp_path / "units.txt"
    path.write_text("old\n")
    written = atomic_write_text(path, "a 1\nb 2\n")
    assert path.read_text() == "a 1\nb 2\n"
    assert written == {"sha256": hashlib.sha256(b"a 1\nb 2\n").hexdigest(), "bytes": 8}
    assert written["sha256"] == file_digest(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["units.txt"]


def test_a_failed_write_keeps_the_old_file_and_names_the_reason(tmp_path):
    path = tmp_path / "data.list"
    path.write_text("old\n")

    def full_disk(f):
        f.write(b"part")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteError, match=r"could not write .*data\.list: .*No space left.*free disk space"):
        atomic_write(path, full_disk)
    assert path.read_text() == "old\n"
    assert not list(tmp_path.glob(TEMP_GLOB))


def test_an_error_of_the_caller_is_raised_as_it_is_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "x.json"

    def bug(f):
        f.write(b"{")
        raise KeyError("epoch")

    with pytest.raises(KeyError):
        atomic_write(path, bug)
    assert not path.exists() and not list(tmp_path.glob(TEMP_GLOB))


def test_remove_temporaries_removes_only_the_temporaries_of_dead_writers(tmp_path):
    (tmp_path / ".epoch_1.pt.tmp-4242").write_bytes(b"half")
    (tmp_path / "epoch_1.pt").write_bytes(b"whole")
    (tmp_path / "notes.tmp").write_text("kept")
    assert remove_temporaries(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch_1.pt", "notes.tmp"]
