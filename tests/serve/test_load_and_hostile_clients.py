"""``asrkit serve`` (the command, as a process) under load -- 16 streams at once in real time,
each final the text the stream gets alone -- and under clients that break the protocol or
the limits -- binary before ``start``, malformed JSON, an unknown signal, an odd number of
PCM bytes, a 10 MB message, a client vanishing mid-stream, 500 idle connections, a wrong
sample rate -- each answered with ``failed`` or a closed connection while a well-behaved
stream running at the same time gets its right text; the connection limit; SIGTERM letting
a stream under way finish."""
from __future__ import annotations

import asyncio
import json
import signal
import socket
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from bench.serve_load import ServeProcess
from tests.serve.serve_helpers import CHUNK_MODEL, ServerThread, alone, with_silence
from tools.wenet_client import stream

IDLE_S = 1.0
pytestmark = pytest.mark.usefixtures("threads_back")


@pytest.fixture(scope="module")
def server():
    proc = ServeProcess("--model", str(CHUNK_MODEL), "--idle_timeout_s", str(IDLE_S), "--max_connections", "600",
                        "--workers", "2", "--grace_s", "10")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def good(chunk_model, utterances):
    pcm = with_silence(utterances[5][1])
    return pcm.tobytes(), alone(chunk_model, pcm)[0]


async def _good_stream(url, good) -> None:
    pcm, text = good
    s = await stream(url, pcm, piece_bytes=3200)
    assert s.final_text() == text and s.replies[-1].type == "speech_end"


async def _replies_until_closed(ws) -> list[dict]:
    out = []
    try:
        async for m in ws:
            out.append(json.loads(m))
    except ConnectionClosed:
        pass
    return out


def _with_good_stream(server, good, hostile):
    async def both():
        return (await asyncio.gather(hostile(server.url), _good_stream(server.url, good)))[0]
    return asyncio.run(both())


@pytest.mark.parametrize("messages, failed", [
    ([b"\x00\x01" * 800], "Start signal is expected before binary data"),
    (['{"signal": "start", "nbest": 1'], "Wrong protocol"),
    (['{"signal": "restart"}'], "Unexpected signal type"),
    (['[1, 2]'], "Wrong protocol"),
    (['{"nbest": 1}'], "Wrong message header"),
    (['{"signal": "start"}', b"\x00" * 3201], "even number of bytes"),
    (['{"signal": "start", "sample_rate": 96000}'], "sample_rate 96000: streams of 8000-48000 Hz"),
    (['{"signal": "start", "nbest": "two"}'], "integer is expected for nbest"),
    (['{"signal": "start"}', '{"signal": "start"}'], "already started"),
])
def test_a_message_the_protocol_does_not_allow_gets_failed_and_a_close(server, good, messages, failed):
    async def hostile(url):
        async with connect(url) as ws:
            for m in messages:
                await ws.send(m)
            replies = await _replies_until_closed(ws)
            return replies, ws.close_code
    replies, code = _with_good_stream(server, good, hostile)
    assert replies[-1]["status"] == "failed" and failed in replies[-1]["message"], replies
    assert [r.get("type") for r in replies[:-1]] in ([], ["server_ready"])
    assert code == 1000


def test_a_10_mb_message_closes_the_connection(server, good):
    async def hostile(url):
        async with connect(url, max_size=None) as ws:
            await ws.send('{"signal": "start"}')
            await ws.recv()
            try:
                await ws.send(bytes(10 << 20))
            except ConnectionClosed:
                pass
            await _replies_until_closed(ws)
            return ws.close_code
    assert _with_good_stream(server, good, hostile) == 1009  # (message too big)


def test_a_client_vanishing_mid_stream(server, good):
    pcm, _ = good

    async def hostile(url):
        ws = await connect(url)
        await ws.send('{"signal": "start", "continuous_decoding": true}')
        await ws.recv()
        for i in range(0, len(pcm) // 2, 3200):
            await ws.send(pcm[i:i + 3200])
        ws.transport.abort()  # (no close frame, no end)
    for _ in range(3):
        _with_good_stream(server, good, hostile)
    deadline = time.time() + 10
    while server.text().count("the client went away") < 3 and time.time() < deadline:
        time.sleep(0.1)
    assert server.text().count("the client went away") >= 3
    asyncio.run(_good_stream(server.url, good))


def test_500_idle_connections_are_dropped_after_the_idle_timeout(server, good):
    raw = [socket.create_connection(("127.0.0.1", server.port), timeout=IDLE_S * 5) for _ in range(500)]

    async def idle_websocket(url):
        async with connect(url) as ws:
            await ws.send('{"signal": "start"}')
            return await _replies_until_closed(ws)
    try:
        t0 = time.time()
        replies = _with_good_stream(server, good, idle_websocket)  # (served while the 500 are open)
        assert replies[0]["type"] == "server_ready" and replies[-1]["status"] == "failed"
        assert "no message for" in replies[-1]["message"]
        for s in raw:
            assert s.recv(1) == b"", "the server closes an idle connection without a reply"
        assert time.time() - t0 < IDLE_S * 4
    finally:
        for s in raw:
            s.close()
    asyncio.run(_good_stream(server.url, good))


def test_connections_beyond_the_limit_are_closed_at_once(chunk_model, good):
    from asrkit.serve import ServedModel, ServerLimits
    local = ServerThread(ServedModel(chunk_model), limits=ServerLimits(max_connections=3))
    try:
        raw = [socket.create_connection(("127.0.0.1", local.server.port)) for _ in range(3)]
        time.sleep(0.2)
        with pytest.raises((ConnectionClosed, InvalidHandshake, OSError, EOFError)):
            asyncio.run(_good_stream(local.url, good))
        assert local.server.gate.refused >= 1
        for s in raw:
            s.close()
        time.sleep(0.2)
        asyncio.run(_good_stream(local.url, good))
    finally:
        local.close()


def test_16_streams_in_real_time_each_get_the_text_decoded_alone(server, chunk_model, utterances):
    from bench.serve_load import load
    chosen = [(f"{key}-{i}", with_silence(audio)) for i, (key, audio) in
              enumerate((utterances * 2)[:16])]
    alone_text = {key: " ".join(t for t in alone(chunk_model, with_silence(audio)) if t) for key, audio in utterances}
    expected = {key: alone_text[key.rsplit("-", 1)[0]] for key, _ in chosen}
    rows = asyncio.run(load(server.url, [(key, pcm.tobytes()) for key, pcm in chosen], streams=16, piece_ms=100))
    assert len(rows) == 16
    assert {r["key"]: r["text"] for r in rows} == expected
    first = sorted(r["first_partial_s"] for r in rows)
    final = sorted(r["final_after_end_s"] for r in rows)
    print(f"16 streams: first partial p50 {first[8]:.3f} s, max {first[-1]:.3f} s; "
          f"final after end p50 {final[8]:.3f} s, max {final[-1]:.3f} s")
    assert final[8] < 2.0 and first[8] < 3.0  # (real time on a loaded 2-core machine: generous bounds)


def test_sigterm_lets_a_stream_under_way_finish_then_exits_0(server, good):
    pcm, text = good

    async def run():
        async with connect(server.url) as ws:
            await ws.send('{"signal": "start"}')
            await ws.recv()
            half = len(pcm) // 2 // 2 * 2
            await ws.send(pcm[:half])
            server.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            with pytest.raises((OSError, InvalidHandshake, ConnectionClosed)):  # (no new connections)
                async with connect(server.url, open_timeout=5):
                    pass
            await ws.send(pcm[half:])
            await ws.send('{"signal": "end"}')
            return [json.loads(m) for m in [m async for m in ws]]
    replies = asyncio.run(run())
    assert [r["type"] for r in replies if r["type"] != "partial_result"] == ["final_result", "speech_end"]
    assert json.loads(replies[-2]["nbest"])[0]["sentence"] == text
    assert server.proc.wait(30) == 0
    assert "stopped" in server.text()


def test_close_ends_streams_that_outlast_the_grace_period(chunk_model, good):
    from asrkit.serve import ServedModel
    local = ServerThread(ServedModel(chunk_model))
    pcm, _ = good

    async def linger():
        async with connect(local.url) as ws:
            await ws.send('{"signal": "start", "continuous_decoding": true}')
            await ws.recv()
            await ws.send(pcm[:6400])
            closing = asyncio.get_running_loop().run_in_executor(None, local.close)
            await _replies_until_closed(ws)
            await closing
            return ws.close_code
    t0 = time.time()
    assert asyncio.run(linger()) == 1001 and time.time() - t0 < 10  # (ServerThread.close: grace 1 s)
