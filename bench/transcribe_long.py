#!/usr/bin/env python3
"""Long files through ``asrkit.load_model(...).transcribe``: wall time and peak memory for
1, 2, 5 and 10-minute files -- both should grow linearly with the length (the file is cut
at endpoints and decoded part by part, docs/transcribe.md).

    python bench/transcribe_long.py --model exp/conformer [--override KEY=VALUE ...] \\
        [--minutes 1 2 5 10] [--mode attention_rescoring] [--utterances 40] \\
        [--gap_s 0.5 1.5] [--long_audio_s 30] [--blank_threshold 0.8] [--repeats 1] \\
        [--num_threads 1] [--seed 5] [--json out.json]

The files: ``--utterances`` connected-digit utterances of the digits corpus's *test*
split (``tools/synthesize_corpus.py``: test-split voices, random rate and pitch, silence
and noise as in the corpus) are synthesized once; each file repeats them in order, each
followed by ``--gap_s`` (0.5-1.5 s) of faint noise, as many whole utterances as fit in its
length, then faint noise up to the length, and is written as a 16 kHz WAV.

Each file is transcribed by a fresh process (``--child``), so that its peak resident
memory (``ru_maxrss``) is that file's alone: it loads the model, notes its resident memory
(``rss_loaded``), transcribes the file from its path and reports the wall time of the
``transcribe`` call, the peak, the segments decoded and the CER against the joined
transcripts (characters without spaces).  The table shows wall time, RTF, seconds per
audio minute, peak RSS and the peak above ``rss_loaded`` (the memory the file itself took).
With ``--repeats N`` each file is transcribed by N processes in turn and the fastest wall
time and the largest peak are reported (on a shared machine the fastest run is the one
least disturbed).
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

from tools import synthesize_corpus as synth

SAMPLE_RATE = 16000


def test_utterances(count: int, seed: int, work: Path) -> list[tuple[np.ndarray, str]]:
    """``count`` test-split utterances of the digits corpus: (samples, transcript)."""
    import soundfile as sf
    variants = synth.default_test_voices()
    (work / "wav").mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        _, _, text, path = synth.make_utterance((str(work), "test", i, seed, "digits", synth.ACCENTS, variants, False))
        out.append((sf.read(path, dtype="float32")[0], text))
    return out


def build_file(utterances: list[tuple[np.ndarray, str]], seconds: float, seed: int,
               gap_s: tuple[float, float] = (0.5, 1.5)) -> tuple[np.ndarray, str]:
    """The utterances repeated in order, each followed by ``gap_s`` seconds (uniform
    between the two) of faint noise, as many as fit in ``seconds`` (at least one), then
    noise up to exactly ``seconds``; and their transcripts joined."""
    rng = np.random.default_rng([seed, int(seconds)])
    target = int(seconds * SAMPLE_RATE)
    pieces, texts, total, i = [], [], 0, 0
    while True:
        samples, text = utterances[i % len(utterances)]
        gap = rng.normal(0.0, 0.002, int(rng.uniform(*gap_s) * SAMPLE_RATE)).astype(np.float32)
        if total + samples.size + gap.size > target and texts:
            break  # (no utterance is cut: the transcript is the whole utterances')
        pieces += [samples, gap]
        texts.append(text)
        total += samples.size + gap.size
        i += 1
    pieces.append(rng.normal(0.0, 0.002, max(0, target - total)).astype(np.float32))  # silence up to the length
    return np.concatenate(pieces)[:target], " ".join(texts)


def rss_mb() -> float:
    """Current resident memory of this process in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2 ** 20


def child(args) -> int:
    import torch

    from asrkit.metrics import align
    from asrkit.transcribe import Segmentation, load_model
    torch.set_num_threads(args.num_threads)
    model = load_model(args.model, args.checkpoint, overrides=args.override)
    loaded = rss_mb()
    start = time.perf_counter()
    segmentation = Segmentation(threshold_s=args.long_audio_s, blank_threshold=args.blank_threshold)
    result = model.transcribe(args.child, mode=args.mode, segmentation=segmentation)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    ref = Path(args.child).with_suffix(".txt").read_text().replace(" ", "")
    hyp = result.text.replace(" ", "")
    print(json.dumps({"audio_s": result.duration, "wall_s": wall, "rss_loaded_mb": loaded, "peak_rss_mb": peak,
                      "segments": len(result.segments), "cer": 100.0 * align(list(ref), list(hyp)).errors / len(ref)}))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="experiment directory or final.zip")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--minutes", type=float, nargs="+", default=[1, 2, 5, 10])
    p.add_argument("--mode", default="attention_rescoring")
    p.add_argument("--utterances", type=int, default=40, help="distinct test utterances the files repeat")
    p.add_argument("--gap_s", type=float, nargs=2, default=[0.5, 1.5], help="silence between utterances")
    p.add_argument("--long_audio_s", type=float, default=30.0, help="Segmentation.threshold_s")
    p.add_argument("--blank_threshold", type=float, default=0.8, help="Segmentation.blank_threshold")
    p.add_argument("--repeats", type=int, default=1, help="processes per file (fastest wall time reported)")
    p.add_argument("--num_threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--json", type=Path)
    p.add_argument("--child", help=argparse.SUPPRESS)  # (internal: transcribe this file and report)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    import soundfile as sf
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        utterances = test_utterances(args.utterances, args.seed, work / "utts")
        for minutes in args.minutes:
            samples, text = build_file(utterances, minutes * 60.0, args.seed, tuple(args.gap_s))
            wav = work / f"long_{minutes:g}min.wav"
            sf.write(str(wav), samples, SAMPLE_RATE, subtype="PCM_16")
            wav.with_suffix(".txt").write_text(text)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(wav), "--model", args.model,
                   "--mode", args.mode, "--long_audio_s", str(args.long_audio_s), "--blank_threshold",
                   str(args.blank_threshold), "--num_threads",
                   str(args.num_threads)]
            cmd += ["--checkpoint", args.checkpoint] if args.checkpoint else []
            for item in args.override:
                cmd += ["--override", item]
            runs = []
            for _ in range(max(1, args.repeats)):
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    print(f"error: {minutes:g} min: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    return 1
                runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            best = min(runs, key=lambda r: r["wall_s"])
            rows.append({"minutes": minutes, **best, "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                         "rss_loaded_mb": min(r["rss_loaded_mb"] for r in runs), "repeats": len(runs)})
    print(f"{args.model}: mode {args.mode}, {args.num_threads} thread(s), files of {args.utterances} "
          f"repeated test utterances")
    print("minutes  audio s  wall s     RTF  s per audio min  peak RSS MiB  above loaded MiB  segments  CER %")
    for r in rows:
        print(f"{r['minutes']:7g}  {r['audio_s']:7.1f}  {r['wall_s']:6.1f}  {r['wall_s'] / r['audio_s']:6.4f}  "
              f"{60.0 * r['wall_s'] / r['audio_s']:15.2f}  {r['peak_rss_mb']:12.0f}  "
              f"{r['peak_rss_mb'] - r['rss_loaded_mb']:16.0f}  {r['segments']:8d}  {r['cer']:5.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
