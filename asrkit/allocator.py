"""Which memory allocator serves this process: the C library's malloc, or jemalloc/tcmalloc
preloaded (``LD_PRELOAD``; the recipes' ``path.sh`` preloads jemalloc when it is installed,
``tools/preload_jemalloc.sh``).  CPU training speed depends on it (docs/performance.md), so
the training log names it."""
from __future__ import annotations

from pathlib import Path

_KNOWN = ("jemalloc", "tcmalloc")


def memory_allocator(maps: str | Path = "/proc/self/maps") -> str:
    """``"jemalloc (<library path>)"`` or ``"tcmalloc (...)"`` when such a library is mapped
    into this process, else ``"the C library's malloc"`` (also where ``maps`` cannot be read:
    not Linux)."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return "the C library's malloc"
    for line in text.splitlines():
        path = (line.split() or [""])[-1]
        for name in _KNOWN:
            if f"lib{name}" in Path(path).name:
                return f"{name} ({path})"
    return "the C library's malloc"
