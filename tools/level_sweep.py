#!/usr/bin/env python3
"""Decode one data list at several recording levels and report each level's error rates.

    tools/level_sweep.py --config exp/x/train.yaml --checkpoint exp/x/avg_3.pt \\
        --data data/real_test/data.list --out exp/x/levels [--levels -45 -35 -25 max] \\
        [--mode attention_rescoring]

People record at whatever gain their device has.  Every utterance of ``--data`` (a raw list:
``wav`` and ``txt``) is written again at each level of ``--levels`` -- a target RMS level in
dBFS (the mean square of the whole utterance against a full-scale square wave: 0 dBFS RMS is
a signal of constant magnitude 1), or ``max``, the loudest gain at which no sample clips (the
peak at 32767/32768) -- as 16-bit PCM WAV under ``<out>/<level>/``, as a quiet device would
store it (quantization included).  A gain that would clip a sample at a dBFS target is
lowered to the ``max`` gain and counted.  The recordings as they are decode too (``as_is``).
Each level is decoded by ``python -m asrkit.bin.recognize`` (``--mode``; a tool runs the
command, not its module) and scored against the transcripts; the table of CER, WER, SER and the change of SER against ``as_is`` goes to
stdout and to ``<out>/levels.md``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PYTHONPATH = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # (the decoder's asrkit)

from asrkit.metrics import read_text, score  # noqa: E402

FULL_SCALE = 32767 / 32768


def rms_dbfs(samples: np.ndarray) -> float:
    """The RMS level of float samples in dBFS (-inf for digital silence)."""
    power = float(np.mean(np.square(samples, dtype=np.float64))) if samples.size else 0.0
    return 10 * math.log10(power) if power > 0 else -math.inf


def gain_for(samples: np.ndarray, level: str) -> tuple[float, bool]:
    """``(gain, clipped_target)``: the factor that brings ``samples`` to ``level`` (dBFS RMS
    or ``max``), and whether a dBFS target was lowered to the no-clip gain."""
    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    loudest = FULL_SCALE / peak if peak > 0 else 1.0
    if level == "max":
        return loudest, False
    current = rms_dbfs(samples)
    if not math.isfinite(current):
        return 1.0, False
    gain = 10 ** ((float(level) - current) / 20)
    return (loudest, True) if gain > loudest else (gain, False)


def write_level(entries: list[dict], level: str, folder: Path) -> tuple[Path, int]:
    """The entries' audio at ``level`` under ``folder``; its data list and the clipped count."""
    (folder / "wav").mkdir(parents=True, exist_ok=True)
    lines, clipped = [], 0
    for entry in entries:
        samples, rate = sf.read(entry["wav"], dtype="float32", always_2d=True)
        samples = samples.mean(axis=1)
        gain, lowered = (1.0, False) if level == "as_is" else gain_for(samples, level)
        clipped += lowered
        path = folder / "wav" / f"{entry['key']}.wav"
        sf.write(str(path), np.clip(samples * gain, -1.0, FULL_SCALE), rate, subtype="PCM_16")
        lines.append(json.dumps({**entry, "wav": str(path.resolve())}, ensure_ascii=False) + "\n")
    data = folder / "data.list"
    data.write_text("".join(lines), encoding="utf-8")
    return data, clipped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, type=Path, help="raw data list (wav, txt)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--levels", nargs="+", default=["-45", "-35", "-25", "max"],
                   help="dBFS RMS targets and/or max (default: -45 -35 -25 max)")
    p.add_argument("--mode", default="attention_rescoring")
    p.add_argument("--num_threads", type=int, default=1, help="torch threads of the decoding (default 1)")
    args = p.parse_args(argv)
    for level in args.levels:
        try:
            ok = level == "max" or float(level) < 0
        except ValueError:
            ok = False
        if not ok:
            print(f"error: --levels {level}: a negative dBFS level or max", file=sys.stderr)
            return 2
    try:
        entries = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        print(f"error: --data {args.data}: {e}", file=sys.stderr)
        return 2
    if not entries or not all("wav" in e and "txt" in e for e in entries):
        print(f"error: --data {args.data}: expected a raw list whose entries have wav and txt", file=sys.stderr)
        return 2
    refs = {e["key"]: e["txt"] for e in entries}
    rows, base = [], None
    for level in ["as_is", *args.levels]:
        folder = args.out / level
        data, clipped = write_level(entries, level, folder)
        print(f"level {level}: decoding {len(entries)} utterances", file=sys.stderr, flush=True)
        status = subprocess.run([sys.executable, "-m", "asrkit.bin.recognize", "--config", args.config,
                                 "--checkpoint", args.checkpoint, "--data", str(data), "--modes", args.mode,
                                 "--result_dir", str(folder / "decode"), "--num_threads", str(args.num_threads)],
                                env={**os.environ, "PYTHONPATH": PYTHONPATH}).returncode
        if status != 0:
            return status
        hyp_path = folder / "decode" / args.mode / "text"
        hyps = read_text(hyp_path.read_text(encoding="utf-8").splitlines(), str(hyp_path))
        cer, _ = score(refs, hyps, mode="char")
        wer, _ = score(refs, hyps, mode="word")
        ser = 100 * wer.utts_wrong / max(wer.utts, 1)
        base = ser if base is None else base
        rows.append(f"| {level} | {100 * cer.rate:.2f} | {100 * wer.rate:.2f} | {ser:.2f} | {ser - base:+.2f} | "
                    f"{clipped} |")
    table = "\n".join([f"{args.mode} on {args.data} ({len(entries)} utterances)", "",
                       "| level (dBFS RMS) | CER % | WER % | SER % | SER change (points) | lowered to max |",
                       "| --- | ---: | ---: | ---: | ---: | ---: |", *rows]) + "\n"
    (args.out / "levels.md").write_text(table, encoding="utf-8")
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
