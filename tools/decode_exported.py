#!/usr/bin/env python3
"""Decode wav files with an exported asrkit model (final.zip) -- torch, torchaudio and
soundfile only, no asrkit import: what a deployment needs.

    tools/decode_exported.py --model exp/conformer/final.zip a.wav b.wav
    tools/decode_exported.py --model exp/conformer/final.zip --wav_scp data/test/wav.scp \\
        [--mode MODE] [--beam_size K] [--ctc_weight W] [--reverse_weight R] [--batch_size 16] [--result_dir DIR]

Prints ``key text`` per utterance (the key of a wav file given on the command line is
its name without the extension) in the input order, decoded in ``--mode``: any mode the
archive runs (its ``supported_modes()``: those of asrkit's decoding modes an archive
carries that the model has the parts for, the transducer's included); by default
``attention_rescoring`` where the archive runs it, else the first of its
``default_modes()``.  ``--result_dir`` also writes the Kaldi ``text`` of every mode
decoded to ``DIR/<mode>/text``: the archive's ``default_modes()`` (every supported mode
but ``attention`` when the model has a CTC head) plus ``--mode``, all from one encoder
pass.  A mode the archive does not run is refused with one line (the archive's own
reason) and exit status 2.  The search options left out take the archive's defaults
(those of ``asrkit.decode.DecodingOptions``).
Features are computed exactly as asrkit computes them for decoding, with the options
stored in the model: down-mix, resample to ``sample_rate()``, Kaldi fbank of the
16-bit-scaled waveform (``num_mel_bins()``, ``frame_length()``, ``frame_shift()``, no
dither, energy floor 0; ``snip_edges``, ``high_freq`` and ``sample_scale`` from the
archive's ``meta.json``, WeNet's fbank when it has none).  CMVN is inside the model.  Utterances are decoded
``--batch_size`` at a time, longest first (as ``asrkit.bin.recognize`` does).

A wav that cannot be read (missing, unreadable, not audio) is skipped with one
``warning: KEY: PATH: ...`` line on stderr, and the others are decoded; it has no output
line and no line in the ``text`` files, and the summary line counts it.  Exit status: 0
when every input was decoded; 2 when an input was skipped (as ``asrkit transcribe``), and
for bad usage -- a missing or malformed ``--wav_scp``, a model file that is not an exported
archive, a mode the model cannot run -- refused with one line before anything is decoded.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import soundfile
import torch
import torchaudio

SPACE = "\u2581"
DEFAULT_MODE = "attention_rescoring"  # (printed by default where the archive runs it)
SEARCH_OPTIONS = ("beam_size", "ctc_weight", "reverse_weight", "blank_skip_threshold")


def usage_error(message: str) -> None:
    """One line on stderr and exit status 2."""
    print(f"decode_exported.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def read_inputs(wavs: list[str], wav_scp: str | None) -> list[tuple[str, str]]:
    """``(key, path)`` pairs: the wav.scp lines, then the files given as arguments."""
    pairs = []
    if wav_scp:
        base = Path(wav_scp).parent
        try:
            lines = Path(wav_scp).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            usage_error(f"cannot read --wav_scp {wav_scp}: {e}")
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            fields = line.strip().split(maxsplit=1)
            if len(fields) != 2 or fields[1].endswith("|"):
                usage_error(f"{wav_scp}:{lineno}: expected 'key path' (pipes are not supported): {line.strip()!r}")
            path = fields[1]
            if not os.path.isabs(path) and not os.path.exists(path) and (base / path).exists():
                path = str(base / path)
            pairs.append((fields[0], path))
    pairs += [(Path(w).stem, w) for w in wavs]
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        usage_error("duplicate utterance keys in the input")
    return pairs


class Frontend:
    """Waveform -> Kaldi fbank with the options stored in the exported model."""

    def __init__(self, model, meta: dict):
        self.snip_edges = bool(meta.get("snip_edges", True))
        self.high_freq = float(meta.get("high_freq", 0.0))
        self.sample_scale = float(meta.get("sample_scale", 1 << 15))
        self.sample_rate = model.sample_rate()
        self.num_mel_bins = model.num_mel_bins()
        self.frame_length = model.frame_length()
        self.frame_shift = model.frame_shift()
        self.dither = model.dither()
        self.energy_floor = model.energy_floor()
        self.resamplers: dict[int, torchaudio.transforms.Resample] = {}

    def load(self, path: str) -> torch.Tensor:
        """Mono float32 waveform ``[1, T]`` in [-1, 1) at the model's sample rate."""
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
        mono = data[:, 0] if data.shape[1] == 1 else data.mean(axis=1, dtype=np.float32)
        wav = torch.from_numpy(np.ascontiguousarray(mono)).unsqueeze(0)
        if rate != self.sample_rate:
            if rate not in self.resamplers:
                self.resamplers[rate] = torchaudio.transforms.Resample(rate, self.sample_rate)
            wav = self.resamplers[rate](wav)
        return wav

    def fbank(self, wav: torch.Tensor) -> torch.Tensor:
        """``[frames, num_mel_bins]`` (no frame for audio shorter than one window)."""
        window = int(self.sample_rate * self.frame_length * 0.001)
        if wav.shape[-1] < window:
            return torch.zeros(0, self.num_mel_bins)
        return torchaudio.compliance.kaldi.fbank(
            wav * self.sample_scale, num_mel_bins=self.num_mel_bins, frame_length=self.frame_length,
            frame_shift=self.frame_shift, dither=self.dither, energy_floor=self.energy_floor,
            snip_edges=self.snip_edges, high_freq=self.high_freq, sample_frequency=float(self.sample_rate))


def skip_input(key: str, path: str, error: Exception, skipped: set[str]) -> None:
    """Report a wav that cannot be read in one line and add its key to ``skipped``."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    print(f"warning: {key}: {path}: not readable audio, skipped ({reason})", file=sys.stderr)
    skipped.add(key)


def to_text(tokens: list[int], units: list[str], separator: str, skip: set[int]) -> str:
    """The text of a hypothesis (the rule of the model's ``unit_separator()``)."""
    symbols = [units[t] for t in tokens if t not in skip]
    if separator:
        return separator.join(symbols)
    return "".join(symbols).replace(SPACE, " ").strip()


def decoded_modes(model, mode: str | None) -> tuple[str, list[str]]:
    """``(the mode printed, every mode decoded)`` of an archive ``model``: ``mode`` (``None``:
    :data:`DEFAULT_MODE` where the archive runs it, else the first of its ``default_modes()``)
    and the archive's ``default_modes()`` with it.  A mode the archive does not run is
    refused as :func:`usage_error` says, in the archive's words."""
    supported, modes = list(model.supported_modes()), list(model.default_modes())
    if mode is None:
        mode = DEFAULT_MODE if DEFAULT_MODE in supported else modes[0]
    if mode not in supported:
        reason = model.mode_refusals.get(mode) or model.unknown_mode.format(mode)
        usage_error(f"--mode {mode}: {reason}; this model's modes: {' '.join(supported)}")
    return mode, modes + ([mode] if mode not in modes else [])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="exported TorchScript archive (final.zip)")
    p.add_argument("wavs", nargs="*", help="wav files (key = file name without extension)")
    p.add_argument("--wav_scp", help="Kaldi wav.scp (key path per line)")
    p.add_argument("--mode", default=None,
                   help=f"mode printed to stdout: one of the archive's supported_modes() (default: {DEFAULT_MODE} "
                        f"where it runs it, else the first of its default_modes())")
    p.add_argument("--beam_size", type=int, default=None, help="(default: the archive's)")
    p.add_argument("--ctc_weight", type=float, default=None, help="(default: the archive's)")
    p.add_argument("--reverse_weight", type=float, default=None, help="(default: the archive's)")
    p.add_argument("--blank_skip_threshold", type=float, default=None, help="(default: the archive's)")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--result_dir", help="also write <result_dir>/<mode>/text for every mode decoded")
    p.add_argument("--num_threads", type=int, default=0, help="intra-op threads (0: torch default)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not args.wavs and not args.wav_scp:
        p.error("give wav files and/or --wav_scp")
    if args.batch_size < 1:
        p.error("--batch_size must be >= 1")
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit's deprecation notice
            extra = {"meta.json": ""}
            model = torch.jit.load(args.model, map_location="cpu", _extra_files=extra).eval()
    except (OSError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"decode_exported.py: error: {args.model}: not an exported asrkit archive ({first})", file=sys.stderr)
        return 2
    mode, modes = decoded_modes(model, args.mode)
    search = {name: getattr(args, name) for name in SEARCH_OPTIONS if getattr(args, name) is not None}
    units = model.units()
    skip = {model.blank_id(), model.eos_symbol()}
    separator = model.unit_separator()
    min_frames = model.min_input_length()
    try:
        meta = json.loads(extra["meta.json"] or "{}")
    except ValueError:
        meta = {}
    frontend = Frontend(model, meta)

    pairs = read_inputs(args.wavs, args.wav_scp)
    texts: dict[str, dict[str, str]] = {}
    durations = {}
    skipped: set[str] = set()
    for key, path in pairs:  # durations from the headers, to batch similar lengths
        try:
            info = soundfile.info(path)
        except (OSError, RuntimeError) as e:  # (soundfile's LibsndfileError is a RuntimeError)
            skip_input(key, path, e, skipped)
            continue
        durations[key] = info.frames / info.samplerate
    pairs = [(key, path) for key, path in pairs if key not in skipped]
    order = sorted(range(len(pairs)), key=lambda i: -durations[pairs[i][0]])
    audio_s = sum(durations.values())
    start = time.perf_counter()
    model_s = 0.0
    for first in range(0, len(order), args.batch_size):
        batch = [pairs[i] for i in order[first: first + args.batch_size]]
        feats = []
        for key, path in batch:
            try:
                feat = frontend.fbank(frontend.load(path))
            except (OSError, RuntimeError) as e:  # (a header that read, then truncated samples)
                skip_input(key, path, e, skipped)
                continue
            if feat.shape[0] < min_frames:
                print(f"warning: {key} has {feat.shape[0]} frames, fewer than the model's minimum "
                      f"{min_frames}: empty hypothesis", file=sys.stderr)
                texts[key] = {m: "" for m in modes}
            else:
                feats.append((key, feat))
        if not feats:
            continue
        lengths = torch.tensor([f.shape[0] for _, f in feats], dtype=torch.long)
        padded = torch.zeros(len(feats), int(lengths.max()), frontend.num_mel_bins)
        for i, (_, f) in enumerate(feats):
            padded[i, : f.shape[0]] = f
        t0 = time.perf_counter()
        with torch.no_grad():
            hyps = model.decode(padded, lengths, modes=modes, **search)
        model_s += time.perf_counter() - t0
        for i, (key, _) in enumerate(feats):
            texts[key] = {mode: to_text(hyps[mode][i], units, separator, skip) for mode in hyps}

    pairs = [(key, path) for key, path in pairs if key not in skipped]
    for key, _ in pairs:
        text = texts[key][mode]
        print(f"{key} {text}" if text else key)
    if args.result_dir:
        for decoded in modes:
            out = Path(args.result_dir) / decoded / "text"
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "w", encoding="utf-8") as f:
                for key, _ in pairs:
                    text = texts[key][decoded]
                    f.write(f"{key} {text}\n" if text else f"{key}\n")
    wall = time.perf_counter() - start
    if audio_s > 0:
        print(f"{len(pairs)} utterances, {audio_s:.1f} s of audio: RTF {wall / audio_s:.4f} "
              f"(model {model_s / audio_s:.4f})", file=sys.stderr)
    if skipped:
        print(f"{len(skipped)} input(s) skipped (not readable audio): {' '.join(sorted(skipped))}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
