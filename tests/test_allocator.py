"""``asrkit.allocator.memory_allocator`` names the allocator mapped into a process."""
from __future__ import annotations

import glob
import subprocess
import sys

import pytest

from asrkit.allocator import memory_allocator
from tests.helpers import REPO

JEMALLOC = sorted(glob.glob("/usr/lib/*/libjemalloc.so.2") + glob.glob("/usr/lib*/libjemalloc.so.2"))


def test_reads_the_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n7f02-7f03 rw-p 0 0 0\n")
    assert memory_allocator(maps) == "the C library's malloc"
    maps.write_text(maps.read_text() + "7f04-7f05 r-xp 00000000 08:01 2 /opt/conda/lib/libtcmalloc.so.4\n")
    assert memory_allocator(maps) == "tcmalloc (/opt/conda/lib/libtcmalloc.so.4)"
    assert memory_allocator(tmp_path / "missing") == "the C library's malloc"


@pytest.mark.skipif(not JEMALLOC, reason="jemalloc is not installed (apt install libjemalloc2)")
def test_a_process_with_jemalloc_preloaded_says_so():
    code = "from asrkit.allocator import memory_allocator; print(memory_allocator())"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LD_PRELOAD": JEMALLOC[0]})
    assert run.stdout.strip() == f"jemalloc ({JEMALLOC[0]})"
