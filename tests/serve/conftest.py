"""Fixtures of the server tests: the two kinds of model and test utterances (what the tests
share besides: ``tests/serve/serve_helpers.py``; the command as a process:
:class:`bench.serve_load.ServeProcess`).

* ``chunk_model``: asrkit's U2++ digits model (``tests/fixtures/asrkit_digits/u2pp``,
  chunk-trained: streamed chunk by chunk);
* ``full_model``: WeNet's full-context reference model (``tests/fixtures/wenet/offline``:
  endpointed segments decoded whole);
* ``utterances``: the tiny corpus's 12 test utterances (espeak-ng digits, 16 kHz) as int16.
"""
from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tests.serve.serve_helpers import CHUNK_MODEL, FULL_MODEL


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


@pytest.fixture(scope="module")
def threads_back():
    """One intra-op thread in this process (the reference decodes; a server on a thread sets its
    own), the count put back afterwards."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
