"""The shipped real speech (corpora/fsdd/recordings.tar.gz, tools/pack_fsdd.py): four speakers'
2,000 takes in the dataset's layout, lossless against the dataset's WAVs (shared/fsdd), under
10 MB; the packer is deterministic and refuses what is not the dataset's in one line."""
from __future__ import annotations

import collections
import io
import re
import tarfile

import numpy as np
import soundfile as sf

from tests.helpers import REPO, run_tool

ARCHIVE = REPO / "corpora" / "fsdd" / "recordings.tar.gz"
SHARED = REPO.parent / "shared" / "fsdd" / "recordings"
SPEAKERS = ("george", "jackson", "lucas", "nicolas")


def test_the_archive_holds_every_take_of_the_four_speakers_losslessly():
    assert ARCHIVE.stat().st_size < 10_000_000
    counts = collections.Counter()
    compared = 0
    with tarfile.open(ARCHIVE) as tar:
        for i, member in enumerate(tar):
            digit, speaker, take = re.fullmatch(r"recordings/(\d)_([a-z]+)_(\d+)\.flac", member.name).groups()
            counts[speaker, digit] += 1
            if i % 97 == 0 and SHARED.is_dir():  # (a spread of 21 takes against the dataset's WAV)
                samples, rate = sf.read(io.BytesIO(tar.extractfile(member).read()), dtype="int16")
                want, want_rate = sf.read(SHARED / f"{digit}_{speaker}_{take}.wav", dtype="int16")
                assert rate == want_rate == 8000 and np.array_equal(samples, want), member.name
                compared += 1
    assert counts == {(s, str(d)): 50 for s in SPEAKERS for d in range(10)}
    assert compared == 21 or not SHARED.is_dir()


def test_packing_is_deterministic_and_bad_input_is_one_line(tmp_path):
    source = tmp_path / "recordings"  # (three of the dataset's WAVs, from the archive's FLAC)
    source.mkdir()
    with tarfile.open(ARCHIVE) as tar:
        for name in ("3_lucas_0", "4_lucas_7", "3_george_1"):
            samples, rate = sf.read(io.BytesIO(tar.extractfile(f"recordings/{name}.flac").read()), dtype="int16")
            sf.write(source / f"{name}.wav", samples, rate, subtype="PCM_16")
    outs = [tmp_path / f"{n}.tar.gz" for n in (1, 2)]
    for out in outs:
        run_tool("pack_fsdd.py", "--recordings", source, "--speakers", "lucas", "--out", out)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    with tarfile.open(outs[0]) as tar:
        assert tar.getnames() == ["recordings/3_lucas_0.flac", "recordings/4_lucas_7.flac"]
    missing = run_tool("pack_fsdd.py", "--recordings", source, "--speakers", "theo", "--out", tmp_path / "x.tar.gz",
                       check=False)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [f"error: {source}: no recordings of theo"]
    (source / "seven.wav").write_bytes(b"")
    bad = run_tool("pack_fsdd.py", "--recordings", source, "--speakers", "lucas", "--out", tmp_path / "x.tar.gz",
                   check=False)
    assert bad.returncode == 2 and "not a <digit>_<speaker>_<take>.wav name" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.tar.gz").exists()
