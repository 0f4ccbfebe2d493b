#!/usr/bin/env python3
"""``asrkit serve`` under load: many concurrent streams sent in real time.

    python bench/serve_load.py --model exp/u2pp [--wav_scp data/test/wav.scp] [--streams 16]
        [--utterances 32] [--workers 2] [--threads_per_worker 1] [--piece_ms 100] [--json out.json]
    python bench/serve_load.py --model exp/u2pp --batching [--batch 16]

Starts ``asrkit serve`` (the command, a process on a free port), streams each utterance alone
once (its reference text), then keeps ``--streams`` streams going at once until
``--utterances`` have been sent, each paced in real time in ``--piece_ms`` pieces with 0.3 s of
silence around it (a WeNet-protocol client, ``continuous_decoding`` false). Reported:

* **first partial**: seconds from the stream's first audio to its first partial result
  (p50/p95; it includes the chunk of audio the partial needs: 640 ms at chunk 16);
* **final after end**: seconds from the ``end`` signal to the final result (p50/p95);
* **CPU**: the server process's CPU seconds per wall second over the loaded phase (1.0 = one
  core busy), and the machine's load average;
* **mismatches**: streams whose final text differs from the same utterance streamed alone.

``--batching``: whether decoding a chunk of several streams in one batch would pay -- the
encoder on ``--batch`` one-chunk inputs one at a time against one batched call (the same
chunk mask), at the server's thread count.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from tools.wenet_client import stream  # (the protocol client the tests use)

REPO = Path(__file__).resolve().parents[1]


class ServeProcess:
    """``python -m asrkit.bin.cli serve ... --port 0`` as a process; :attr:`port` read from
    its log; :meth:`stop` sends SIGTERM and returns its exit status and log."""

    def __init__(self, *args: str, timeout: float = 60):
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"asrkit-serve-{os.getpid()}-{time.time_ns()}.log"
        self.log = open(self.log_path, "w+")
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "asrkit.bin.cli", "serve", "--port", "0", *args],
                                     cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
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


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def read_wavs(wav_scp: Path, count: int) -> list[tuple[str, bytes]]:
    out = []
    for line in wav_scp.read_text().splitlines()[:count]:
        key, path = line.split(maxsplit=1)
        audio, rate = sf.read(path, dtype="int16")
        if rate != 16000:
            raise SystemExit(f"error: {path}: {rate} Hz; the bench sends 16 kHz audio")
        pad = np.zeros(4800, np.int16)
        out.append((key, np.concatenate([pad, audio, pad]).tobytes()))
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(url: str, utterances: list[tuple[str, bytes]], streams: int, piece_ms: float) -> list[dict]:
    """Every utterance streamed in real time, ``streams`` at once; one row per stream."""
    piece = int(16000 * piece_ms / 1000) * 2
    queue = list(utterances)
    rows = []

    async def worker():
        while queue:
            key, pcm = queue.pop(0)
            s = await stream(url, pcm, piece_bytes=piece, realtime=True)
            partials = s.of_type("partial_result")
            finals = s.of_type("final_result")
            rows.append({"key": key, "text": s.final_text(),
                         "first_partial_s": partials[0].at if partials else None,
                         "final_after_end_s": (finals[-1].at - s.end_sent_at) if finals and s.end_sent_at else None})
    await asyncio.gather(*(worker() for _ in range(streams)))
    return rows


def measure(url: str, pid: int, utterances, streams: int, piece_ms: float) -> dict:
    alone = {key: asyncio.run(stream(url, pcm)).final_text() for key, pcm in utterances}
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    rows = asyncio.run(load(url, utterances, streams, piece_ms))
    wall = time.perf_counter() - t0
    cpu = (cpu_seconds(pid) - cpu0) / wall
    first = [r["first_partial_s"] for r in rows if r["first_partial_s"] is not None]
    final = [r["final_after_end_s"] for r in rows if r["final_after_end_s"] is not None]
    return {"streams": streams, "utterances": len(rows), "wall_s": round(wall, 2),
            "first_partial_p50_s": round(percentile(first, 50), 3), "first_partial_p95_s": round(percentile(first, 95), 3),
            "final_after_end_p50_s": round(percentile(final, 50), 3),
            "final_after_end_p95_s": round(percentile(final, 95), 3),
            "server_cpu_cores": round(cpu, 2), "load_average": round(os.getloadavg()[0], 2),
            "mismatches": [r["key"] for r in rows if r["text"] != alone[r["key"]]],
            "empty_finals": sum(1 for r in rows if not r["text"])}


def batching(model_dir: str, batch: int, threads: int, chunk: int = 16, repeats: int = 20) -> dict:
    """Encoder time of ``batch`` one-chunk inputs one by one against one batched call."""
    import torch
    from asrkit.transcribe import load_model
    torch.set_num_threads(threads)
    model = load_model(model_dir).backend.model
    enc = model.encoder
    window = (chunk - 1) * enc.embed.rate + enc.embed.right_context + 1
    xs = torch.randn(batch, window, load_model(model_dir).backend.num_mel_bins)
    lengths = torch.full([batch], window)

    def timed(fn) -> float:
        fn()
        t = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t) / repeats
    with torch.inference_mode():
        one_by_one = timed(lambda: [enc(xs[i:i + 1], lengths[i:i + 1], chunk) for i in range(batch)])
        batched = timed(lambda: enc(xs, lengths, chunk))
    return {"batch": batch, "threads": threads, "one_by_one_ms": round(one_by_one * 1000, 2),
            "batched_ms": round(batched * 1000, 2), "speedup": round(one_by_one / batched, 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--wav_scp", type=Path, default=None, help="utterances (default: the digits recipe's test set)")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--utterances", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads_per_worker", type=int, default=1)
    p.add_argument("--piece_ms", type=float, default=100.0)
    p.add_argument("--batching", action="store_true")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.batching:
        result = batching(args.model, args.batch, args.threads_per_worker)
    else:
        wav_scp = args.wav_scp or REPO / "examples" / "digits" / "s0" / "data" / "test" / "wav.scp"
        if not wav_scp.is_file():
            print(f"error: {wav_scp}: no such wav.scp", file=sys.stderr)
            return 2
        server = ServeProcess("--model", args.model, "--workers", str(args.workers),
                              "--threads_per_worker", str(args.threads_per_worker))
        try:
            result = measure(server.url, server.proc.pid, read_wavs(wav_scp, args.utterances), args.streams,
                             args.piece_ms)
        finally:
            server.stop()
        result.update(workers=args.workers, threads_per_worker=args.threads_per_worker, model=args.model)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
