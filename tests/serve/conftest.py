"""Fixtures of the server tests: the two kinds of model, test utterances, a server on a
thread of this process (:class:`ServerThread`) and the ``asrkit serve`` command as a process
(:class:`ServeProcess`).

* ``chunk_model``: asrkit's U2++ digits model (``tests/fixtures/asrkit_digits/u2pp``,
  chunk-trained: streamed chunk by chunk);
* ``full_model``: WeNet's full-context reference model (``tests/fixtures/wenet/offline``:
  endpointed segments decoded whole);
* ``utterances``: the tiny corpus's 12 test utterances (espeak-ng digits, 16 kHz) as int16.
"""
from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import REPO, repo_env

CHUNK_MODEL = REPO / "tests" / "fixtures" / "asrkit_digits" / "u2pp"
FULL_MODEL = REPO / "tests" / "fixtures" / "wenet" / "offline"


@pytest.fixture(scope="session")
def chunk_model():
    from asrkit.transcribe import load_model
    return load_model(CHUNK_MODEL)


@pytest.fixture(scope="session")
def full_model():
    from asrkit.transcribe import load_model
    return load_model(FULL_MODEL)


@pytest.fixture(scope="session")
def utterances(tiny_corpus) -> list[tuple[str, np.ndarray]]:
    out = []
    for line in tiny_corpus.splits["test"].wav_scp.read_text().splitlines():
        key, path = line.split(maxsplit=1)
        audio, rate = sf.read(path, dtype="int16")
        assert rate == 16000
        out.append((key, audio))
    return out


def with_silence(audio: np.ndarray, before_s: float = 0.3, after_s: float = 0.3) -> np.ndarray:
    return np.concatenate([np.zeros(int(before_s * 16000), np.int16), audio, np.zeros(int(after_s * 16000), np.int16)])


class ServerThread:
    """A :class:`asrkit.serve.RecognitionServer` on its own event loop in a thread."""

    def __init__(self, served, **kwargs):
        from asrkit.serve import RecognitionServer
        self.server = RecognitionServer(served, port=0, **kwargs)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        self.url = f"ws://127.0.0.1:{self.server.port}/"
        self.http = f"http://127.0.0.1:{self.server.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(grace_s=1.0), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def threads_back():
    import torch
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


class ServeProcess:
    """``python -m asrkit.bin.cli serve ... --port 0`` as a process; :attr:`port` read from
    its log; :meth:`stop` sends SIGTERM and returns its exit status and log."""

    def __init__(self, *args: str, timeout: float = 60):
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"asrkit-serve-{os.getpid()}-{time.time_ns()}.log"
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "asrkit.bin.cli", "serve", "--port", "0", *args],
                                     cwd=REPO, env=repo_env(), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = re.search(r"listening on https?://[^:]+:(\d+)/", self.log_path.read_text())
            if found:
                self.port = int(found.group(1))
                self.url = f"ws://127.0.0.1:{self.port}/"
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"asrkit serve did not start: {self.log_path.read_text()[-2000:]}")

    def text(self) -> str:
        return self.log_path.read_text()

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode
