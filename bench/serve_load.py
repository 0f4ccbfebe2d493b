#!/usr/bin/env python3
"""``asrkit serve`` under load: many concurrent streams sent in real time.

    python -m bench.serve_load --model exp/u2pp [--wav_scp data/test/wav.scp] [--streams 16]
        [--utterances 32] [--workers 2] [--threads_per_worker 1] [--piece_ms 100] [--json out.json]
    python -m bench.serve_load --model exp/u2pp [--max_batch 8] [--batch_window_ms 5]
    python -m bench.serve_load --model exp/u2pp --batching [--batch 16]

Starts ``asrkit serve`` (the command, a process on a free port) without batching and streams
each utterance alone once (its reference text), then another with the options measured, and
keeps ``--streams`` streams going at once until ``--utterances`` have been sent, each paced in
real time in ``--piece_ms`` pieces with 0.3 s of silence around it (a WeNet-protocol client,
``continuous_decoding`` false). Reported:

* **first partial**: seconds from the stream's first audio to its first partial result
  (p50/p95; it includes the chunk of audio the partial needs: 640 ms at chunk 16);
* **final after end**: seconds from the ``end`` signal to the final result (p50/p95);
* **CPU**: the server process's CPU seconds per wall second over the loaded phase (1.0 = one
  core busy), and the machine's load average;
* **mismatches**: streams whose final text differs from the same utterance streamed alone.

``--max_batch`` / ``--batch_window_ms``: the server's batching (``--max_batch 1``: off).  Also
reported, from the server's log at its end: chunks run, compute per chunk (encoder + search,
wall) and its encoder part, the batches; and the server's CPU seconds per chunk.

``--batching``: the batched encoder step itself, no server: ``--batch`` streams of the model at
different positions (0 to 5 chunks into an utterance of the test set), their next chunks
through the encoder one stream at a time (``StreamingRecognizer.encode``) against one batched
call (``asrkit.stream.stacked_chunks.encode_chunks``), at ``--threads_per_worker`` torch threads, and
the largest difference between the two.
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

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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


def references(server_args: list[str], utterances) -> dict[str, str]:
    """Each utterance's final text streamed alone, by a server of its own without batching."""
    server = ServeProcess(*server_args, "--max_batch", "1")
    try:
        return {key: asyncio.run(stream(server.url, pcm)).final_text() for key, pcm in utterances}
    finally:
        server.stop()


def measure(url: str, pid: int, utterances, streams: int, piece_ms: float, alone: dict[str, str]) -> dict:
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
            "server_cpu_cores": round(cpu, 2), "server_cpu_s": round(cpu * wall, 2), "load_average": round(os.getloadavg()[0], 2),
            "mismatches": [r["key"] for r in rows if r["text"] != alone[r["key"]]],
            "empty_finals": sum(1 for r in rows if not r["text"])}


def server_stats(log: str) -> dict:
    """The chunk and batching figures the server logs when it stops."""
    out = {}
    found = re.search(r"chunks: (\d+) run, ([\d.]+) ms a chunk \(encoder ([\d.]+) ms", log)
    if found:
        out.update(chunks=int(found.group(1)), compute_ms_per_chunk=float(found.group(2)),
                   encoder_ms_per_chunk=float(found.group(3)))
    found = re.search(r"batching: \d+ chunks in (\d+) batches \(([\d.]+) a batch, largest (\d+)\)", log)
    if found:
        out.update(batches=int(found.group(1)), mean_batch=float(found.group(2)), largest_batch=int(found.group(3)))
    return out


def batching(model_dir: str, wav_scp: Path, batch: int, threads: int, chunk: int = 16, repeats: int = 30) -> dict:
    """The encoder step of ``batch`` streams at different positions, one at a time against batched."""
    import torch
    from asrkit.decode import DecodingOptions
    from asrkit.stream.stacked_chunks import encode_chunks
    from asrkit.stream.recognizer import StreamingRecognizer
    from asrkit.transcribe import load_model
    torch.set_num_threads(threads)
    backend = load_model(model_dir).backend
    options = DecodingOptions(modes=("attention_rescoring",), decoding_chunk_size=chunk)
    streams = []
    for i, (_, pcm) in enumerate(read_wavs(wav_scp, batch)):
        r = StreamingRecognizer(backend.model, options, sample_rate=16000, endpoint_rules=None,
                                **backend.fbank_options())
        samples = torch.from_numpy(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0)
        r.add_waveform(torch.cat([samples] * 4))  # (long enough for 6 chunks)
        for _ in range(i % 6):  # (0 to 5 chunks in: caches of 0 to 80 frames)
            r.advance(r.next_window(), *r.encode(r.next_window()))
        streams.append(r)
    windows = [r.next_window() for r in streams]
    saved = [(r.offset, r.att_cache, r.cnn_cache) for r in streams]

    def restore():
        for r, (offset, att, cnn) in zip(streams, saved):
            r.offset, r.att_cache, r.cnn_cache = offset, att, cnn

    def once(fn) -> tuple[float, list]:
        restore()
        t = time.perf_counter()
        outs = fn()
        return time.perf_counter() - t, outs

    def alone_step():
        return [r.encode(w)[0] for r, w in zip(streams, windows)]

    def batched_step():
        return encode_chunks(streams, windows)[0]
    once(alone_step), once(batched_step)  # (warm-up)
    times = {"alone": [], "batched": []}
    for _ in range(repeats):  # (interleaved, the median of each: the machine is shared)
        seconds, alone = once(alone_step)
        times["alone"].append(seconds)
        seconds, together = once(batched_step)
        times["batched"].append(seconds)
    one_by_one, batched = (float(np.median(times[k])) for k in ("alone", "batched"))
    difference = max(float((a - b).abs().max()) for a, b in zip(alone, together))
    return {"batch": batch, "threads": threads, "offsets": [o for o, _, _ in saved],
            "one_by_one_ms": round(one_by_one * 1000, 2), "batched_ms": round(batched * 1000, 2),
            "one_by_one_ms_per_chunk": round(one_by_one * 1000 / batch, 2),
            "batched_ms_per_chunk": round(batched * 1000 / batch, 2),
            "speedup": round(one_by_one / batched, 2), "max_abs_difference": difference}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--wav_scp", type=Path, default=None, help="utterances (default: the digits recipe's test set)")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--utterances", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads_per_worker", type=int, default=1)
    p.add_argument("--piece_ms", type=float, default=100.0)
    p.add_argument("--max_batch", type=int, default=8)
    p.add_argument("--batch_window_ms", type=float, default=5.0)
    p.add_argument("--batching", action="store_true")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    wav_scp = args.wav_scp or REPO / "examples" / "digits" / "s0" / "data" / "test" / "wav.scp"
    if not wav_scp.is_file():
        print(f"error: {wav_scp}: no such wav.scp", file=sys.stderr)
        return 2
    if args.batching:
        result = batching(args.model, wav_scp, args.batch, args.threads_per_worker)
    else:
        common = ["--model", args.model, "--workers", str(args.workers),
                  "--threads_per_worker", str(args.threads_per_worker)]
        utterances = read_wavs(wav_scp, args.utterances)
        alone = references(common, utterances)
        server = ServeProcess(*common, "--max_batch", str(args.max_batch), "--batch_window_ms", str(args.batch_window_ms))
        try:
            result = measure(server.url, server.proc.pid, utterances, args.streams, args.piece_ms, alone)
        finally:
            server.stop()
        result.update(server_stats(server.text()))
        if result.get("chunks"):
            result["server_cpu_ms_per_chunk"] = round(1000 * result["server_cpu_s"] / result["chunks"], 2)
        result.update(workers=args.workers, threads_per_worker=args.threads_per_worker, max_batch=args.max_batch,
                      batch_window_ms=args.batch_window_ms, model=args.model)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
