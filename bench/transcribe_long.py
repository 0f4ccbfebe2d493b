#!/usr/bin/env python3
"""Long recordings through ``asrkit.load_model(...).transcribe``: the CER of a long file
against its utterances decoded one by one, wall time and peak memory; and what silence,
noise and tones alone transcribe to (nothing, when the detector does its job).

    python -m bench.transcribe_long --model exp/conformer_cpu [--model exp/u2pp_cpu ...] \\
        [--minutes 1 10] [--gaps 0.2-0.5 0] [--mode attention_rescoring] [--utterances 300] \\
        [--non_speech] [--no_vad] [--segmentation FIELD=VALUE ...] [--split test|dev] \\
        [--num_threads 1] [--seed 5] [--json out.json]

The files: ``--utterances`` connected-digit utterances with the voices of the digits
corpus's *test* split (``--split dev``: the dev split's, to choose settings on;
``tools/synthesize_corpus.py``: random rate and pitch, their own
0.05-0.6 s of leading and trailing silence, noise at 10-35 dB SNR) are synthesized once.
Each long file holds them in order (repeating when the file is longer than all of them),
each followed by a pause drawn uniformly from the ``--gaps`` range (``0.2-0.5``: 0.2 to
0.5 s; ``0``: none: the utterances back to back) of faint noise (-54 dBFS), as many whole
utterances as fit in its length, then faint noise up to the length; 16 kHz WAV.

Per model, one process decodes each utterance alone and whole (``Segmentation.whole()``,
as ``recognize`` decodes an utterance): "parts"; then each long file is transcribed from
its path by a fresh process (so that its peak resident memory, ``VmHWM``, is that
file's alone) with the default segmentation (or ``--no_vad``): the wall time of the
``transcribe`` call, the peak, the peak above the memory after loading the model, the
parts decoded, and CER (characters without spaces) and WER of the file's transcript
against the joined transcripts -- beside the CER and WER of the same utterances, in the
same order, decoded one by one.

``--non_speech``: files without speech -- digital silence (10 s, 60 s, 5 min), white and
pink noise, a 440 Hz tone and a C major chord (C4 E4 G4) at -30, -20 and -10 dBFS (RMS re
a full-scale sine, 10 s each) -- transcribed by each model; their texts should be empty.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import synthesize_corpus as synth

SAMPLE_RATE = 16000
GAP_NOISE_STD = 0.002  # -54 dBFS: the faint noise of a quiet room between utterances


def parse_gap(text: str) -> tuple[float, float]:
    """``"0.2-0.5"`` -> (0.2, 0.5); ``"0"`` -> (0.0, 0.0)."""
    low, _, high = text.partition("-")
    return float(low), float(high or low)


def synthesize_utterances(count: int, seed: int, work: Path, split: str = "test") -> list[dict]:
    """``count`` utterances with the voices of the digits corpus's ``split`` (``test`` or
    ``dev``: voices training never heard) written to ``work/wav``: ``{"wav", "text"}`` each."""
    variants = synth.split_variants(synth.list_variants(), synth.DEFAULT_SEED, synth.DEFAULT_DEV_SHARE,
                                    synth.DEFAULT_TEST_SHARE)[split]
    (work / "wav").mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        _, _, text, path = synth.make_utterance((str(work), split, i, seed, "digits", synth.ACCENTS, variants, False))
        out.append({"wav": path, "text": text})
    return out


def build_file(utterances: list[np.ndarray], seconds: float, gap_s: tuple[float, float],
               seed: int) -> tuple[np.ndarray, list[int]]:
    """The utterances in order (repeating), each followed by a pause uniform in ``gap_s``
    of faint noise, as many whole ones as fit in ``seconds`` (at least one), then noise up
    to exactly ``seconds``; and the utterance indices in the order the file holds them."""
    rng = np.random.default_rng([seed, int(seconds * 10), int(gap_s[0] * 1000), int(gap_s[1] * 1000)])
    target = int(seconds * SAMPLE_RATE)
    pieces, order, total = [], [], 0
    while True:
        i = len(order) % len(utterances)
        gap = rng.normal(0.0, GAP_NOISE_STD, int(rng.uniform(*gap_s) * SAMPLE_RATE)).astype(np.float32)
        if total + utterances[i].size + gap.size > target and order:
            break  # (no utterance is cut: the reference is the whole utterances')
        pieces += [utterances[i], gap]
        order.append(i)
        total += utterances[i].size + gap.size
    pieces.append(np.random.default_rng(seed).normal(0.0, GAP_NOISE_STD, max(0, target - total)).astype(np.float32))
    return np.concatenate(pieces)[:target], order


def non_speech_files(seed: int) -> list[tuple[str, np.ndarray]]:
    """``(name, samples)`` of the non-speech files of ``--non_speech``."""
    rng = np.random.default_rng(seed)
    files = [(name, np.zeros(int(secs * SAMPLE_RATE), np.float32))
             for name, secs in (("digital silence 10 s", 10), ("digital silence 60 s", 60),
                                ("digital silence 5 min", 300))]
    t = np.arange(10 * SAMPLE_RATE) / SAMPLE_RATE
    white = rng.normal(0.0, 1.0, t.size)
    pink = np.fft.irfft(np.fft.rfft(rng.normal(0.0, 1.0, t.size)) / np.sqrt(np.maximum(
        np.fft.rfftfreq(t.size, 1.0 / SAMPLE_RATE), 20.0)), t.size)
    shapes = {"white noise": white, "pink noise": pink, "440 Hz tone": np.sin(2 * np.pi * 440.0 * t),
              "C major chord": sum(np.sin(2 * np.pi * f * t) for f in (261.63, 329.63, 392.00))}
    for level in (-30, -20, -10):
        rms = 10 ** (level / 20) / np.sqrt(2)  # dBFS: RMS relative to a full-scale sine
        for name, x in shapes.items():
            files.append((f"{name} {level} dBFS", (x * rms / np.sqrt(np.mean(x ** 2))).astype(np.float32)))
    return files


def rss_mb() -> float:
    """Current resident memory of this process in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2 ** 20


def peak_rss_mb() -> float:
    """Peak resident memory of this process's address space in MiB (``VmHWM``).  Not
    ``ru_maxrss``: Linux carries that over from the parent across fork + exec, so a child
    would report at least its parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


def _load(args):
    import torch

    from asrkit.transcribe import Segmentation, load_model
    torch.set_num_threads(args.num_threads)
    model = load_model(args.model[0], overrides=args.override)
    settings = {k: (None if v == "none" else float(v)) for k, v in (item.split("=", 1) for item in args.segmentation)}
    return model, Segmentation(vad=not args.no_vad, **settings)


def child_file(args) -> int:
    """Transcribe one long file; report time, memory, parts and the text."""
    model, segmentation = _load(args)
    loaded = rss_mb()
    start = time.perf_counter()
    result = model.transcribe(args.child_file, mode=args.mode, segmentation=segmentation)
    wall = time.perf_counter() - start
    peak = peak_rss_mb()
    print(json.dumps({"audio_s": result.duration, "wall_s": wall, "rss_loaded_mb": loaded, "peak_rss_mb": peak,
                      "segments": len(result.segments), "text": result.text}))
    return 0


def child_parts(args) -> int:
    """Decode each utterance of the list alone and whole; report their texts."""
    from asrkit.transcribe import Segmentation
    model, _ = _load(args)
    rows = json.loads(Path(args.child_parts).read_text())
    start = time.perf_counter()
    texts = [model.transcribe(r["wav"], mode=args.mode, segmentation=Segmentation.whole()).text for r in rows]
    print(json.dumps({"texts": texts, "wall_s": time.perf_counter() - start}))
    return 0


def child_non_speech(args) -> int:
    """Transcribe the non-speech files; report their texts."""
    model, segmentation = _load(args)
    out = []
    for name, samples in non_speech_files(args.seed):
        out.append({"file": name, "text": model.transcribe(samples, SAMPLE_RATE, mode=args.mode,
                                                           segmentation=segmentation).text})
    print(json.dumps(out))
    return 0


def error_rates(refs: list[str], hyps: list[str]) -> tuple[float, float]:
    """(CER of the characters without spaces, WER) of the joined texts, in %."""
    from asrkit.metrics import align
    ref, hyp = " ".join(refs), " ".join(hyps)
    chars = align(list(ref.replace(" ", "")), list(hyp.replace(" ", "")))
    words = align(ref.split(), hyp.split())
    return 100.0 * chars.errors / max(1, len(ref.replace(" ", ""))), 100.0 * words.errors / max(1, len(ref.split()))


def run_child(args, flag: str, value: str, model: str) -> dict:
    cmd = [sys.executable, "-m", "bench.transcribe_long", flag, value, "--model", model, "--mode", args.mode,
           "--num_threads", str(args.num_threads), "--seed", str(args.seed)]
    cmd += ["--no_vad"] if args.no_vad else []
    for item in args.segmentation:
        cmd += ["--segmentation", item]
    for item in args.override:
        cmd += ["--override", item]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: {model} {flag} {value}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, help="experiment directory or final.zip (repeatable)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--minutes", type=float, nargs="+", default=[1, 10])
    p.add_argument("--gaps", nargs="+", default=["0.2-0.5", "0"], help="pauses between utterances: LOW-HIGH s or S")
    p.add_argument("--mode", default="attention_rescoring")
    p.add_argument("--utterances", type=int, default=300, help="distinct test utterances the files hold")
    p.add_argument("--non_speech", action="store_true", help="also the silence / noise / tone table")
    p.add_argument("--no_vad", action="store_true", help="Segmentation(vad=False): decoded in 20 s pieces")
    p.add_argument("--segmentation", action="append", default=[], metavar="FIELD=VALUE",
                   help="a Segmentation setting other than the default, e.g. min_pause_s=0.08 (repeatable)")
    p.add_argument("--split", choices=("test", "dev"), default="test",
                   help="the voices of the utterances (dev: for choosing settings)")
    p.add_argument("--num_threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--json", type=Path)
    p.add_argument("--child_file", help=argparse.SUPPRESS)  # (internal: the child processes)
    p.add_argument("--child_parts", help=argparse.SUPPRESS)
    p.add_argument("--child_non_speech", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child_file:
        return child_file(args)
    if args.child_parts:
        return child_parts(args)
    if args.child_non_speech:
        return child_non_speech(args)
    import soundfile as sf
    report = {"long": [], "non_speech": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        utts = synthesize_utterances(args.utterances, args.seed, work / "utts", args.split)
        (work / "utts.json").write_text(json.dumps(utts))
        samples = [sf.read(u["wav"], dtype="float32")[0] for u in utts]
        files = []
        for gap in args.gaps:
            for minutes in args.minutes:
                audio, order = build_file(samples, minutes * 60.0, parse_gap(gap), args.seed)
                wav = work / f"long_{gap}_{minutes:g}min.wav"
                sf.write(str(wav), audio, SAMPLE_RATE, subtype="PCM_16")
                files.append((gap, minutes, wav, order))
        for model in args.model:
            parts = run_child(args, "--child_parts", str(work / "utts.json"), model)["texts"]
            for gap, minutes, wav, order in files:
                row = run_child(args, "--child_file", str(wav), model)
                refs = [utts[i]["text"] for i in order]
                cer, wer = error_rates(refs, [row.pop("text")])
                parts_cer, parts_wer = error_rates(refs, [parts[i] for i in order])
                report["long"].append({"model": model, "gap": gap, "minutes": minutes, "utterances": len(order),
                                       **row, "cer": cer, "wer": wer, "parts_cer": parts_cer, "parts_wer": parts_wer})
            if args.non_speech:
                for row in run_child(args, "--child_non_speech", "1", model):
                    report["non_speech"].append({"model": model, **row})
    print_report(args, report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def print_report(args, report: dict) -> None:
    segmentation = "no VAD: 20 s pieces" if args.no_vad else "segmentation (VAD) " + (
        " ".join(args.segmentation) or "defaults")
    print(f"mode {args.mode}, {args.num_threads} thread(s), {segmentation}; test utterances one by one "
          "('parts') vs joined in one file")
    print("| model | pause s | minutes | utterances | CER % | parts CER % | WER % | parts WER % | wall s | RTF "
          "| peak RSS MiB | above loaded MiB | parts decoded |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in report["long"]:
        print(f"| {r['model']} | {r['gap']} | {r['minutes']:g} | {r['utterances']} | {r['cer']:.2f} | "
              f"{r['parts_cer']:.2f} | {r['wer']:.2f} | {r['parts_wer']:.2f} | {r['wall_s']:.1f} | "
              f"{r['wall_s'] / r['audio_s']:.4f} | {r['peak_rss_mb']:.0f} | "
              f"{r['peak_rss_mb'] - r['rss_loaded_mb']:.0f} | {r['segments']} |")
    if report["non_speech"]:
        print("\n| model | file | transcript |\n| --- | --- | --- |")
        for r in report["non_speech"]:
            print(f"| {r['model']} | {r['file']} | {json.dumps(r['text'])} |")


if __name__ == "__main__":
    sys.exit(main())
