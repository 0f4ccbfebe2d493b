"""The carried corpus of the GPU check: speech corpora synthesized here (espeak-ng), packed
into one compressed archive that travels to a machine without espeak-ng.

Layout of the archive (``tar.gz``): ``MANIFEST.json`` (what each corpus is and how it was
made) and one folder per corpus, ``<name>/<split>/`` holding ``wav/*.wav`` (16 kHz, 16-bit
PCM, as ``tools/synthesize_corpus.py`` wrote them), ``text``, ``utt2spk`` and ``wav.scp``
whose paths are relative to the split folder (``wav/<key>.wav``).  The GPU check extracts
it (``bench.gpu_stages.corpus.unpack_corpus``: tools extract no archive) and rewrites each
``wav.scp`` to absolute paths, so the split folders are what ``tools/synthesize_corpus.py``
would have written there.

Corpora packed by ``tools/prepare_gpu_carry.py``: ``tiny`` (the test fixtures' corpus,
``tests/conftest.py``) and ``digits`` (the GPU check's digits stage)."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

MANIFEST = "MANIFEST.json"
SPLIT_FILES = ("text", "utt2spk")


def pack_corpus(corpora: dict[str, Path], archive: Path, manifest: dict) -> int:
    """Pack ``{name: corpus folder}`` (split folders as ``tools/synthesize_corpus.py`` writes
    them) into ``archive`` with ``manifest`` as ``MANIFEST.json``; returns its size in bytes."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    staged = archive.with_name(archive.name + ".partial")
    with tarfile.open(staged, "w:gz", compresslevel=9) as tar:
        _add_text(tar, MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        for name, root in corpora.items():
            for split_dir in sorted(p for p in Path(root).iterdir() if (p / "wav.scp").is_file()):
                prefix = f"{name}/{split_dir.name}"
                scp = []
                for line in (split_dir / "wav.scp").read_text(encoding="utf-8").splitlines():
                    key, path = line.split(maxsplit=1)
                    tar.add(path, f"{prefix}/wav/{Path(path).name}")
                    scp.append(f"{key} wav/{Path(path).name}\n")
                _add_text(tar, f"{prefix}/wav.scp", "".join(scp))
                for f in SPLIT_FILES:
                    tar.add(split_dir / f, f"{prefix}/{f}")
    staged.rename(archive)
    return archive.stat().st_size


def _add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def read_manifest(archive: Path) -> dict:
    """The ``MANIFEST.json`` of ``archive``."""
    with tarfile.open(archive, "r:gz") as tar:
        member = tar.extractfile(MANIFEST)
        if member is None:
            raise ValueError(f"{archive} has no {MANIFEST}")
        return json.loads(member.read().decode("utf-8"))
