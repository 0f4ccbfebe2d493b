"""The server: one port, a websocket stream per connection at ``/`` (WeNet's protocol,
:mod:`asrkit.serve.protocol`), the page and file uploads over plain HTTP (:mod:`asrkit.serve.http`).

Streams share one :class:`~asrkit.serve.model.ServedModel`; each has its own session
(:mod:`asrkit.serve.session`).  Decoding runs off the event loop in a thread pool of
``workers`` threads (each a stream's call at a time; torch's intra-op threads are set to
``threads_per_worker``), so the loop keeps reading every connection while streams decode;
a stream's calls run one after another, in order.  With ``max_batch`` > 1 the encoder of
chunk sessions' full chunks runs through a :class:`~asrkit.serve.chunk_batcher.ChunkBatcher`: the
chunks of streams ready within ``batch_window_s`` of each other (or queued while the workers
were busy) go through the encoder in one forward, up to ``max_batch`` at a time; the rest of
each stream's decoding stays its own.  ``max_batch`` 1: every stream alone.

Limits (:class:`ServerLimits`): ``max_connections`` (beyond it a connection is closed at
once), ``idle_timeout_s`` (a connection that sends nothing for that long gets ``failed`` and
is closed; one whose HTTP request has not arrived by then is dropped), ``max_message_bytes``
(a larger websocket message closes the connection with code 1009), ``max_upload_bytes``
(a larger upload gets 413).  A client message the protocol does not allow gets ``failed``
and the connection is closed; the others are served on.  SIGTERM (or :meth:`close`):
no new connections, streams under way get ``grace_s`` to finish, then the rest are closed
(code 1001).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import signal
import ssl
from typing import Optional

import torch
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from asrkit.serve import protocol as wenet
from asrkit.serve.chunk_batcher import ChunkBatcher
from asrkit.serve.http import (Gate, connection_factory, html_response, is_upgrade, json_response, response, route,
                               upload_name)
from asrkit.serve.model import ServedModel, SessionError
from asrkit.serve.page import page_html
from asrkit.transcribe import AudioError

log = logging.getLogger("asrkit.serve")
DEFAULT_MAX_BATCH = 8
DEFAULT_BATCH_WINDOW_S = 0.005


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    max_connections: int = 256
    idle_timeout_s: float = 30.0
    max_message_bytes: int = 256 << 10
    max_upload_bytes: int = 100 << 20
    grace_s: float = 10.0


class RecognitionServer:
    """``served`` on ``host:port`` (``port`` 0: a free one, :attr:`port` after :meth:`start`),
    TLS with ``ssl_context``."""

    def __init__(self, served: ServedModel, host: str = "127.0.0.1", port: int = 10086, *, workers: int = 2,
                 threads_per_worker: int = 1, limits: ServerLimits = ServerLimits(),
                 ssl_context: Optional[ssl.SSLContext] = None, max_batch: int = DEFAULT_MAX_BATCH,
                 batch_window_s: float = DEFAULT_BATCH_WINDOW_S):
        self.served, self.host, self.port, self.limits = served, host, port, limits
        self.ssl_context = ssl_context
        self.workers, self.threads_per_worker = workers, threads_per_worker
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="asrkit-decode")
        # (a chunk model's every stream is a chunk session: the streams under way are the batcher's)
        self.batcher = (ChunkBatcher(self.pool, max_batch, batch_window_s, streams=lambda: self.streams)
                        if max_batch > 1 and served.kind == "chunks" else None)
        self.gate = Gate(limits.max_connections, limits.idle_timeout_s, limits.max_upload_bytes)
        self.streams = 0  # streams under way
        self.chunks, self.chunks_s, self.encoder_s = 0, 0.0, 0.0  # chunk sessions ended: chunks, compute, encoder
        self._ids = itertools.count(1)
        self._server = None

    async def start(self) -> None:
        torch.set_num_threads(self.threads_per_worker)
        self._server = await serve(self._stream, self.host, self.port, process_request=self._http,
                                   create_connection=connection_factory(self.gate), ssl=self.ssl_context,
                                   max_size=self.limits.max_message_bytes, open_timeout=None,
                                   ping_interval=20, ping_timeout=20, close_timeout=5, max_queue=8)
        self.port = self._server.sockets[0].getsockname()[1]
        scheme = "https" if self.ssl_context else "http"
        log.info("serving %s", self.served.describe())
        log.info("listening on %s://%s:%d/ (websocket on the same port, path /), %d workers x %d threads, %s",
                 scheme, self.host, self.port, self.workers, self.threads_per_worker,
                 f"chunks batched across streams (up to {self.batcher.max_batch}, window "
                 f"{1000 * self.batcher.window_s:g} ms)" if self.batcher else "no batching")

    async def close(self, grace_s: Optional[float] = None) -> None:
        """Stop accepting, let streams finish for ``grace_s`` (default the limit's), close the rest."""
        if self._server is None:
            return
        self._server.server.close()  # (the listening socket only: websockets' close() is once, and closes all)
        deadline = asyncio.get_running_loop().time() + (self.limits.grace_s if grace_s is None else grace_s)
        while self.streams and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        self._server.close(close_connections=True)
        await self._server.wait_closed()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self._server = None
        if self.chunks:
            log.info("chunks: %d run, %.2f ms a chunk (encoder %.2f ms, the rest of the decoding per stream)",
                     self.chunks, 1000 * self.chunks_s / self.chunks, 1000 * self.encoder_s / self.chunks)
        if self.batcher is not None:
            log.info("batching: %s", self.batcher.stats.describe())

    async def run_until_signal(self) -> None:
        """Serve until SIGTERM or SIGINT, then :meth:`close`."""
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("stopping: no new connections, %d streams get %g s to finish", self.streams, self.limits.grace_s)
        await self.close()
        log.info("stopped")

    async def _decode(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def _batched(self, session) -> bool:
        """Whether ``session``'s chunks go through the batcher: batching, a chunk session, and
        another such stream under way (alone, the session runs its chunks itself: one pool call)."""
        return self.batcher is not None and self.streams > 1

    async def _accept(self, session, data: bytes) -> list:
        """``session.accept(data)``, its full chunks' encoder through the batcher when batching."""
        if not self._batched(session):
            return await self._decode(session.accept, data)
        await self._decode(session.feed, data)
        return await self._chunks(session)

    async def _finish(self, session) -> list:
        """``session.finish()``, likewise."""
        if not self._batched(session):
            return await self._decode(session.finish)
        await self._decode(session.end_input)
        return await self._chunks(session) + await self._decode(session.finish_chunks)

    async def _chunks(self, session) -> list:
        events = []
        while (window := session.next_window()) is not None:
            out, encoder_s = await self.batcher.encode(session.recognizer, window)
            events += await self._decode(session.advance, window, out, encoder_s)
        return events

    # ------------------------------------------------------------------------- HTTP

    async def _http(self, connection, request):
        method, path = route(request)
        if method == "GET" and is_upgrade(request):
            return None if path == "/" else response(404, b"websocket streams are at path /\n", "text/plain")
        if method == "GET" and path in ("/", "/index.html"):
            return html_response(page_html(self.served.info()))
        if method == "GET" and path == "/info":
            return json_response(200, self.served.info())
        if method == "POST" and path in ("/", "/transcribe"):
            return await self._upload(connection, request)
        if method in ("GET", "POST"):
            return response(404, b"not found\n", "text/plain; charset=utf-8")
        return response(405, b"GET or POST\n", "text/plain; charset=utf-8")

    async def _upload(self, connection, request):
        if connection.body_error is not None:
            status, message = connection.body_error
            return json_response(status, {"error": message})
        if connection.body_too_large:
            return json_response(413, {"error": f"upload larger than {self.limits.max_upload_bytes} bytes"})
        if not connection.body:
            return json_response(400, {"error": "no file: POST the file's bytes as the request body"})
        name = upload_name(request)
        try:
            return json_response(200, await self._decode(self.served.transcribe_bytes, connection.body, name))
        except AudioError as e:
            return json_response(400, {"error": f"{name or 'upload'}: {e.reason.replace('_', ' ')}"
                                                + (f" ({e.detail})" if e.detail else "")})

    # ------------------------------------------------------------------------- streams

    async def _stream(self, ws) -> None:
        number = next(self._ids)
        session, start = None, None
        try:
            while True:
                try:
                    message = await asyncio.wait_for(ws.recv(), self.limits.idle_timeout_s)
                except TimeoutError:
                    return await self._fail(ws, number, f"no message for {self.limits.idle_timeout_s:g} s")
                if isinstance(message, str):
                    try:
                        signal_ = wenet.parse_text(message)
                    except wenet.ProtocolError as e:
                        return await self._fail(ws, number, str(e))
                    if isinstance(signal_, wenet.Start):
                        if session is not None:
                            return await self._fail(ws, number, "the stream has already started")
                        try:
                            session = await self._decode(self.served.new_session, signal_)
                        except SessionError as e:
                            return await self._fail(ws, number, str(e))
                        start = signal_
                        self.streams += 1
                        await ws.send(wenet.server_ready())
                        log.info("stream %d: server_ready (%s, %s)", number, session.kind,
                                 "continuous" if start.continuous_decoding else "one utterance")
                        continue
                    if session is None:
                        return await self._fail(ws, number, "Start signal is expected before the end signal")
                    await self._send(ws, await self._finish(session), start, final_ends=False)
                    return await self._end(ws, number)
                if session is None:
                    return await self._fail(ws, number, "Start signal is expected before binary data")
                try:
                    wenet.pcm_samples_count(message)
                except wenet.ProtocolError as e:
                    return await self._fail(ws, number, str(e))
                if await self._send(ws, await self._accept(session, message), start,
                                    final_ends=not start.continuous_decoding):
                    return await self._end(ws, number)
        except ConnectionClosed:
            log.info("stream %d: the client went away", number)
        except Exception as e:  # (a fault of this stream's decoding: the others go on)
            log.exception("stream %d: decoding failed", number)
            await self._fail(ws, number, f"internal error: {type(e).__name__}")
        finally:
            if session is not None:
                self.streams -= 1
                if session.kind == "chunks":
                    self.chunks += session.chunks
                    self.chunks_s += session.chunks_s
                    self.encoder_s += session.encoder_s

    async def _send(self, ws, events, start: wenet.Start, final_ends: bool) -> bool:
        """Send ``events``; True when a final result ends the stream (not continuous)."""
        n = start.nbest
        for event in events:
            if event.final:
                await ws.send(wenet.final_result(event.texts[:n], event.words[:n]))
                if final_ends:
                    return True
            else:
                await ws.send(wenet.partial_result(event.texts[:n]))
        return False

    async def _end(self, ws, number: int) -> None:
        await ws.send(wenet.speech_end())
        await self._close(ws, "speech end")
        log.info("stream %d: speech_end", number)

    async def _fail(self, ws, number: int, message: str) -> None:
        log.info("stream %d: failed: %s", number, message)
        try:
            await ws.send(wenet.failed(message))
            await self._close(ws, "failed")
        except ConnectionClosed:
            pass

    @staticmethod
    async def _close(ws, reason: str) -> None:
        """Close, reading (and dropping) what the client still sends meanwhile: its close
        frame may be queued behind audio the stream no longer reads."""
        async def drain():
            try:
                async for _ in ws:
                    pass
            except ConnectionClosed:
                pass
        reader = asyncio.ensure_future(drain())
        try:
            await ws.close(1000, reason)
        finally:
            reader.cancel()
