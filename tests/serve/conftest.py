"""Fixtures of the server tests: the two kinds of model, test utterances, a server on a
thread of this process (:class:`ServerThread`) and the ``asrkit serve`` command as a process
(:class:`bench.serve_load.ServeProcess`).

* ``chunk_model``: asrkit's U2++ digits model (``tests/fixtures/asrkit_digits/u2pp``,
  chunk-trained: streamed chunk by chunk);
* ``full_model``: WeNet's full-context reference model (``tests/fixtures/wenet/offline``:
  endpointed segments decoded whole);
* ``utterances``: the tiny corpus's 12 test utterances (espeak-ng digits, 16 kHz) as int16.
"""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import soundfile as sf

from bench.serve_load import ServeProcess  # noqa: F401  (the tests' too)
from tests.helpers import REPO

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
    """One intra-op thread in this process (the reference decodes; a server on a thread sets its
    own), the count put back afterwards."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
