"""What the server tests share: the two models' paths, silence around audio, asrkit's own
streaming recognizer as the reference (:func:`alone`), and a server on a thread of this
process (:class:`ServerThread`)."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import torch

from asrkit.decode import DecodingOptions
from asrkit.stream.recognizer import StreamingRecognizer
from tests.helpers import REPO

CHUNK_MODEL = REPO / "tests" / "fixtures" / "asrkit_digits" / "u2pp"
FULL_MODEL = REPO / "tests" / "fixtures" / "wenet" / "offline"


def alone(model, pcm: np.ndarray, chunk: int = 16) -> list[str]:
    """Final texts of asrkit's streaming recognizer on ``pcm`` (the server's settings)."""
    b = model.backend
    options = DecodingOptions(modes=("attention_rescoring",), decoding_chunk_size=chunk)
    rec = StreamingRecognizer(b.model, options, sample_rate=16000, **b.fbank_options())
    results = rec.accept_waveform(torch.from_numpy(pcm.astype(np.float32) / 32768.0)) + rec.finish()
    return [b.text(r.tokens) for r in results if r.final]


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
