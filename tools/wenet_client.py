#!/usr/bin/env python3
"""A WeNet websocket-protocol client written from the protocol (WeNet's
``runtime/core/websocket/websocket_server.cc`` and its clients), not from asrkit's server code:
it imports nothing of ``asrkit`` (the server's tests and ``bench/serve_load.py`` use it).

    python tools/wenet_client.py [--url ws://127.0.0.1:10086/] [--realtime] [--continuous] WAV...

prints every reply of the server per file (16-bit PCM WAV at 16 kHz).

``stream(url, pcm, ...)`` opens ``url``, sends ``{"signal": "start", ...}``, the 16-bit PCM in
pieces (optionally paced in real time), ``{"signal": "end"}``, and collects every reply until the
server closes the connection, each with its arrival time.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from typing import Optional

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


@dataclasses.dataclass
class Reply:
    at: float        # seconds since the stream's first audio was sent
    message: dict

    @property
    def type(self) -> str:
        return self.message.get("type", self.message.get("status"))

    def sentences(self) -> list[str]:
        nbest = self.message["nbest"]
        assert isinstance(nbest, str), f"nbest must be a JSON string, got {type(nbest).__name__}"
        return [entry["sentence"] for entry in json.loads(nbest)]

    def word_pieces(self) -> list[dict]:
        return json.loads(self.message["nbest"])[0]["word_pieces"]


@dataclasses.dataclass
class Session:
    replies: list[Reply]
    end_sent_at: Optional[float]
    close_code: Optional[int]

    def of_type(self, kind: str) -> list[Reply]:
        return [r for r in self.replies if r.type == kind]

    def final_text(self) -> str:
        return " ".join(s for r in self.of_type("final_result") if (s := r.sentences()[0]))


async def stream(url: str, pcm: bytes, *, piece_bytes: int = 3200, realtime: bool = False, rate: int = 16000,
                 start: Optional[dict] = None, send_end: bool = True) -> Session:
    """One stream (module docstring); ``start``: the start message (default WeNet's client's)."""
    start = start or {"signal": "start", "nbest": 1, "continuous_decoding": False}
    replies: list[Reply] = []
    async with connect(url, max_size=None, open_timeout=30) as ws:
        await ws.send(json.dumps(start))
        ready = json.loads(await ws.recv())
        replies.append(Reply(0.0, ready))
        if ready.get("status") != "ok":
            try:
                await ws.recv()
            except ConnectionClosed:
                pass
            return Session(replies, None, ws.close_code)
        t0 = time.perf_counter()

        async def receive():
            try:
                async for text in ws:
                    replies.append(Reply(time.perf_counter() - t0, json.loads(text)))
            except ConnectionClosed:
                pass

        receiver = asyncio.create_task(receive())
        end_at = None
        try:
            for i in range(0, len(pcm), piece_bytes):
                if realtime:
                    await asyncio.sleep(max(0.0, t0 + i / 2 / rate - time.perf_counter()))
                await ws.send(pcm[i:i + piece_bytes])
            if send_end:
                end_at = time.perf_counter() - t0
                await ws.send(json.dumps({"signal": "end"}))
        except ConnectionClosed:
            pass
        await asyncio.wait_for(receiver, 120)
        return Session(replies, end_at, ws.close_code)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="ws://127.0.0.1:10086/")
    p.add_argument("--realtime", action="store_true", help="pace the audio in real time")
    p.add_argument("--continuous", action="store_true", help="continuous_decoding: a final per utterance")
    p.add_argument("wavs", nargs="+")
    args = p.parse_args(argv)
    import soundfile
    for wav in args.wavs:
        audio, rate = soundfile.read(wav, dtype="int16")
        if audio.ndim != 1:
            audio = audio[:, 0]
        start = {"signal": "start", "nbest": 1, "continuous_decoding": args.continuous, "sample_rate": rate}
        s = asyncio.run(stream(args.url, audio.tobytes(), realtime=args.realtime, rate=rate, start=start))
        for r in s.replies:
            print(f"{wav}\t{r.at:.2f}\t{json.dumps(r.message, ensure_ascii=False)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
