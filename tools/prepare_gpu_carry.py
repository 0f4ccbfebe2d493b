#!/usr/bin/env python3
"""Prepare what the GPU check (``bench/gpu_check.py``) carries to a GPU machine that has no
espeak-ng, no soundfile and no network:

* ``.gpu_carry/gpu_corpus.tar.gz``: the corpora it trains on, synthesized here with
  espeak-ng (``tools/synthesize_corpus.py``) and packed by ``tools.carried_corpus``:
  ``tiny`` (the test fixtures' 48/12/12 utterances, seed 7: ``pytest -m gpu`` reads it
  through ``ASRKIT_TEST_CORPUS``) and ``digits`` (the digits stage's train/dev sets);
* ``.whl/``: the ``soundfile`` wheel for Python 3.12 manylinux x86_64 with the wheels it
  needs that the machine lacks (cffi, pycparser; numpy and typing-extensions are there).

Usage (from the repository root; about 15 s and a few MiB)::

    python -m tools.prepare_gpu_carry [--carry .gpu_carry --wheels .whl --digits_train 160 --digits_dev 32]

docs/performance.md ("GPU check") gives the device command that carries both folders.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.carried_corpus import pack_corpus
from tools import synthesize_corpus

CORPUS_ARCHIVE = "gpu_corpus.tar.gz"
# soundfile and what it needs beyond the GPU machine's packages (KINDS.md lists them);
# the versions of this project's venv
WHEELS = ("soundfile==0.14.0", "cffi==2.1.1", "pycparser==3.12")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
TINY = {"train": 48, "dev": 12, "test": 12, "seed": 7}  # tests/conftest.py's TINY_SIZES and seed
DIGITS_SEED = 1


def download_wheels(dest: Path) -> list[Path]:
    """``pip download`` each of :data:`WHEELS` for CPython 3.12 on manylinux x86_64 into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {spec.split("==")[0].lower(): spec.split("==")[1] for spec in WHEELS}
    for old in dest.glob("*.whl"):  # one version of each: two stop the install there
        name, version = old.name.split("-")[:2]
        if name.lower() in wanted and version != wanted[name.lower()]:
            old.unlink()
    for spec in WHEELS:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "--implementation", "cp",
               *[arg for platform in PLATFORMS for arg in ("--platform", platform)], "-d", str(dest), spec]
        subprocess.run(cmd, check=True)
    return sorted(p for p in dest.glob("*.whl") if p.name.split("-")[0].lower() in wanted)


def synthesize(out: Path, train: int, dev: int, test: int, seed: int) -> Path:
    code = synthesize_corpus.main(["--out", str(out), "--train", str(train), "--dev", str(dev),
                                   "--test", str(test), "--seed", str(seed)])
    if code != 0:
        raise SystemExit(f"error: tools/synthesize_corpus.py failed for {out}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--carry", type=Path, default=Path(".gpu_carry"), help="folder for the corpus archive")
    p.add_argument("--wheels", type=Path, default=Path(".whl"), help="folder for the wheels")
    p.add_argument("--digits_train", type=int, default=160)
    p.add_argument("--digits_dev", type=int, default=32)
    p.add_argument("--no_wheels", action="store_true", help="make the corpus only")
    args = p.parse_args(argv)
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        print("error: espeak-ng and sox are needed here to synthesize the corpus (apt-get install espeak-ng sox)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu_carry_") as tmp:
        tiny = synthesize(Path(tmp) / "tiny", TINY["train"], TINY["dev"], TINY["test"], TINY["seed"])
        digits = synthesize(Path(tmp) / "digits", args.digits_train, args.digits_dev, 0, DIGITS_SEED)
        manifest = {"tiny": dict(TINY), "made_by": "python -m tools.prepare_gpu_carry",
                    "digits": {"train": args.digits_train, "dev": args.digits_dev, "test": 0, "seed": DIGITS_SEED}}
        size = pack_corpus({"tiny": tiny, "digits": digits}, args.carry / CORPUS_ARCHIVE, manifest)
    print(f"{args.carry / CORPUS_ARCHIVE}: {size / 2**20:.1f} MiB")
    if not args.no_wheels:
        wheels = download_wheels(args.wheels)
        print(f"{args.wheels}: {', '.join(w.name for w in wheels)} "
              f"({sum(w.stat().st_size for w in wheels) / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
