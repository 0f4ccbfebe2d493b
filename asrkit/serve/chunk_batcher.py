"""Streams' chunks run through the encoder together (``--max_batch``, ``--batch_window_ms``).

A chunk session's stream (:class:`~asrkit.serve.session.ChunkSession`) hands each full chunk
it has to :meth:`ChunkBatcher.encode` and waits.  The first chunk to arrive when no batch is
waiting opens a window of ``window_s``; at its end a batch job goes to the decoding pool, and
when a worker starts it, the job takes every chunk waiting by then (up to ``max_batch``, of one
length) and runs them in one encoder forward (:func:`asrkit.stream.stacked_chunks.encode_chunks`: each
stream its own start, attention and convolution caches).  The window closes early when every
stream under way has a chunk waiting (one stream alone never waits) or ``max_batch`` are.  So
a chunk arriving alone waits at most the window and runs alone, and chunks that queue while
the workers are busy -- when batching pays -- run together.  Chunks left over (more than
``max_batch``) get the next job at once.
The search and the rest of each stream's decoding stay per stream (the session's
:meth:`~asrkit.serve.session.ChunkSession.advance`, its own pool call); a stream's last,
shorter chunk runs alone (:meth:`~asrkit.serve.session.ChunkSession.finish_chunks`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Callable

import torch

from asrkit.stream.stacked_chunks import encode_chunks


@dataclasses.dataclass
class _Chunk:
    recognizer: object
    window: torch.Tensor
    future: asyncio.Future


@dataclasses.dataclass
class BatchStats:
    """Chunks and batches run so far, and the encoder's wall time on them."""

    chunks: int = 0
    batches: int = 0
    encoder_s: float = 0.0
    largest: int = 0

    def describe(self) -> str:
        if not self.batches:
            return "no chunks batched"
        return (f"{self.chunks} chunks in {self.batches} batches ({self.chunks / self.batches:.2f} a batch, "
                f"largest {self.largest}), encoder {1000 * self.encoder_s / self.chunks:.2f} ms a chunk")


class ChunkBatcher:
    """Batches of at most ``max_batch`` chunks, collected for ``window_s`` seconds, run in
    ``pool`` (the server's decoding pool; module docstring).  ``streams()``: the number of
    streams under way that send it chunks (the server's count; when all of them have a chunk
    waiting, the batch goes at once: none is left to wait for)."""

    def __init__(self, pool, max_batch: int, window_s: float, streams: Callable[[], int]):
        if max_batch < 2:
            raise ValueError(f"a batcher batches 2 chunks or more, got max_batch {max_batch}")
        if not 0.0 <= window_s <= 1.0:
            raise ValueError(f"the batch window must be in [0, 1] s, got {window_s}")
        self.pool, self.max_batch, self.window_s = pool, max_batch, window_s
        self.stats = BatchStats()
        self._lock = threading.Lock()  # (the pool's threads take chunks; the loop adds them)
        self._waiting: list[_Chunk] = []
        self._job_waiting = False      # a job is on its way that will take the chunks waiting
        self._window = None            # the window open (a timer), while no job is on its way
        self.streams = streams

    async def encode(self, recognizer, window: torch.Tensor) -> tuple[torch.Tensor, float]:
        """``recognizer``'s chunk ``window`` (:meth:`StreamingRecognizer.next_window`) through
        the encoder, with others when they come in time.  Returns ``(out [1, T, D], seconds)``:
        the encoder frames and this chunk's share of its batch's time."""
        loop = asyncio.get_running_loop()
        chunk = _Chunk(recognizer, window, loop.create_future())
        with self._lock:
            self._waiting.append(chunk)
            taken = self._job_waiting  # (the job on its way takes this chunk too when it starts)
            # no one else to wait for: every stream's chunk is here, or a batch's worth
            now = not taken and (len(self._waiting) >= min(self.max_batch, max(self.streams(), 1))
                                 or self.window_s == 0)
            self._job_waiting = taken or now
        if now:
            if self._window is not None:
                self._window.cancel()
                self._window = None
            self._submit(loop)
        elif not taken and self._window is None:
            self._window = loop.call_later(self.window_s, self._window_ends, loop)
        return await chunk.future

    def _window_ends(self, loop: asyncio.AbstractEventLoop) -> None:
        self._window = None
        with self._lock:
            if self._job_waiting or not self._waiting:
                return
            self._job_waiting = True
        self._submit(loop)

    def _submit(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.run_in_executor(self.pool, self._run, loop)
        except RuntimeError as e:  # (the pool shut down: the server is closing)
            with self._lock:
                waiting, self._waiting, self._job_waiting = self._waiting, [], False
            for chunk in waiting:
                _settle(chunk.future, error=e)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        """A pool job: the chunks waiting now, at most ``max_batch`` of one length, in one forward."""
        with self._lock:
            length = self._waiting[0].window.size(0) if self._waiting else 0
            batch = [c for c in self._waiting if c.window.size(0) == length][:self.max_batch]
            taken = {id(c) for c in batch}
            self._waiting = [c for c in self._waiting if id(c) not in taken]
            more = self._job_waiting = bool(self._waiting)
        if more:  # (more than one batch's worth, or another length: the next job now, they have waited)
            loop.call_soon_threadsafe(self._submit, loop)
        if not batch:
            return
        try:
            outs, seconds = encode_chunks([c.recognizer for c in batch], [c.window for c in batch])
        except BaseException as e:  # (each stream of the batch fails; the others go on)
            error = e if isinstance(e, Exception) else RuntimeError(f"batch interrupted: {type(e).__name__}")
            for c in batch:
                loop.call_soon_threadsafe(_settle, c.future, None, error)
            if error is not e:
                raise
            return
        with self._lock:
            s = self.stats
            s.chunks, s.batches, s.encoder_s = s.chunks + len(batch), s.batches + 1, s.encoder_s + seconds
            s.largest = max(s.largest, len(batch))
        for c, out in zip(batch, outs):
            loop.call_soon_threadsafe(_settle, c.future, (out, seconds / len(batch)))


def _settle(future: asyncio.Future, result=None, error=None) -> None:
    if future.done():  # (its stream went away meanwhile)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
