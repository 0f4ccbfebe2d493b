"""Streams' chunks batched through the encoder (``--max_batch``, :mod:`asrkit.serve.chunk_batcher`):
several clients at once, started at different times and sending different piece sizes (so
their chunks meet the batch at different positions), get the same final results -- texts,
n-best and word pieces -- from a server batching their chunks as from one running every
stream alone (``max_batch`` 1), and the texts asrkit's streaming recognizer gives each alone;
the batcher did run chunks of several streams together."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.serve.serve_helpers import ServerThread, alone, with_silence
from tools.wenet_client import stream

pytestmark = pytest.mark.usefixtures("threads_back")


async def _clients(url: str, pcms: list[bytes]) -> list:
    async def one(i: int, pcm: bytes):
        await asyncio.sleep(0.15 * (i % 3))  # (staggered: one stream far into its audio when another starts)
        start = {"signal": "start", "nbest": 2, "continuous_decoding": i == 0}
        return await stream(url, pcm, piece_bytes=(1600, 3200, 6400)[i % 3], start=start)
    return await asyncio.gather(*(one(i, pcm) for i, pcm in enumerate(pcms)))


def _finals(sessions) -> list:
    return [[(r.sentences(), r.word_pieces()) for r in s.of_type("final_result")] for s in sessions]


def test_concurrent_streams_get_the_same_finals_batched_as_alone(chunk_model, utterances):
    from asrkit.serve import ServedModel
    first = np.concatenate([with_silence(utterances[1][1], after_s=1.6), with_silence(utterances[2][1])])
    pcms = [first] + [with_silence(utterances[i][1]) for i in (3, 4, 6, 7, 8)]
    served = ServedModel(chunk_model)
    results = {}
    for max_batch in (1, 8):
        server = ServerThread(served, workers=1, max_batch=max_batch, batch_window_s=0.02)
        try:
            results[max_batch] = asyncio.run(_clients(server.url, [p.tobytes() for p in pcms]))
            stats = server.server.batcher.stats if server.server.batcher else None
        finally:
            server.close()
    assert stats is not None and stats.largest >= 3 and stats.batches < stats.chunks, stats.describe()
    assert _finals(results[8]) == _finals(results[1])
    texts = [[r.sentences()[0] for r in s.of_type("final_result") if r.sentences()[0]] for s in results[8]]
    assert len(texts[0]) == 2  # (the continuous stream: two utterances, two finals)
    assert texts == [[t for t in alone(chunk_model, pcm) if t] for pcm in pcms]
    assert all(s.replies[-1].type == "speech_end" for s in results[8])
