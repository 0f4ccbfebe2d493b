"""Helpers for the recipe tests (tests/examples/test_*_recipe.py): copy a recipe under a
path with spaces, run its ``run.sh``, synthesize utterances for fabricated corpora, pack
and serve tarballs for the download stage."""
from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path

from tests.helpers import REPO

MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]
CER_LINE = r"^%CER \d+\.\d\d \[ \d+ / \d+, \d+ ins, \d+ del, \d+ sub \]$"


def copy_recipe(name: str, dst: Path) -> Path:
    """Copy ``examples/<name>/s0`` (run.sh, path.sh, conf/, local/ if any) to ``dst``."""
    src = REPO / "examples" / name / "s0"
    dst.mkdir(parents=True)
    for item in ("run.sh", "path.sh", "conf", "local"):
        if (src / item).exists():  # (not every recipe has local/)
            (shutil.copytree if (src / item).is_dir() else shutil.copy)(src / item, dst / item)
    return dst


def run_recipe(cwd: Path, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """``bash run.sh ARGS`` in ``cwd`` (the asrkit checkout given by ``ASRKIT_ROOT``);
    with ``check`` a failure raises with the tail of its output."""
    env = dict(os.environ, ASRKIT_ROOT=str(REPO))
    proc = subprocess.run(["bash", "run.sh", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"run.sh {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def synthesize(text: str, voice: str, path: Path, rate: int = 240) -> None:
    """Speak ``text`` with espeak-ng ``voice`` into ``path``: 16 kHz mono 16-bit, in the
    format of the suffix (``.wav`` or ``.flac``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    espeak = subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "--stdout", text],
                            capture_output=True, check=True)
    subprocess.run(["sox", "-R", "-t", "wav", "-", "-r", "16000", "-b", "16", "-c", "1", str(path)],
                   input=espeak.stdout, capture_output=True, check=True)


def make_tgz(archive: Path, base: Path, *members: str) -> Path:
    """Tar+gzip ``base/<member>`` (files or directories) as ``<member>`` into ``archive``."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for member in members:
            tar.add(base / member, arcname=member)
    return archive


@contextlib.contextmanager
def serve_directory(root: Path):
    """An HTTP server on 127.0.0.1 serving ``root``; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep the test output clean
        pass


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()
