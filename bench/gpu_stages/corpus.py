"""The carried corpus unpacked on the GPU machine (its layout and packing:
:mod:`tools.carried_corpus`)."""
from __future__ import annotations

import tarfile
from pathlib import Path


def unpack_corpus(archive: Path, dest: Path, name: str) -> Path:
    """Extract corpus ``name`` of ``archive`` into ``dest`` and return its folder
    (``dest/name``, split folders inside, each ``wav.scp`` with absolute paths).  Only
    regular files and folders under ``name/`` are extracted (tarfile's "data" filter)."""
    dest = Path(dest)
    with tarfile.open(archive, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"{name}/")]
        if not members:
            raise ValueError(f"{archive} holds no corpus {name!r} (has: {sorted(corpus_names(tar))})")
        tar.extractall(dest, members=members, filter="data")
    root = dest / name
    for scp in root.glob("*/wav.scp"):
        lines = []
        for line in scp.read_text(encoding="utf-8").splitlines():
            key, rel = line.split(maxsplit=1)
            lines.append(f"{key} {(scp.parent / rel).resolve()}\n")
        scp.write_text("".join(lines), encoding="utf-8")
    return root


def corpus_names(tar: tarfile.TarFile) -> set[str]:
    return {m.name.split("/", 1)[0] for m in tar.getmembers() if "/" in m.name}
