#!/usr/bin/env python3
"""Memory of ``model: whisper`` per OpenAI model size: parameters counted from the dimensions
(asrkit's model of :func:`asrkit.checkpoint.whisper.wenet_config`, with its CTC head) and the
bytes they make for inference (fp32 / bf16 weights) and for fine-tuning with Adam in fp32
(weights + gradients + two moments = 16 bytes per parameter, before activations); and, for the
sizes given to ``--measure``, the peak resident memory of a fresh process measured while it
builds the model at random weights (no download here) and then runs one training step
(forward, backward, Adam) on a batch of ``--batch`` utterances of ``--seconds`` s each.

    python bench/whisper_memory.py --measure tiny base --batch 4 --seconds 10

Prints a Markdown table (docs/whisper.md has the last one, with the machine)."""
from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys

# OpenAI's published dimensions (each checkpoint's "dims"); the *.en vocabulary is 51864
TINY = dict(n_mels=80, n_vocab=51865, n_audio_ctx=1500, n_audio_state=384, n_audio_head=6, n_audio_layer=4,
            n_text_ctx=448, n_text_state=384, n_text_head=6, n_text_layer=4)
SIZES = {
    "tiny": TINY,
    "base": dict(TINY, n_audio_state=512, n_audio_head=8, n_audio_layer=6, n_text_state=512, n_text_head=8,
                 n_text_layer=6),
    "small": dict(TINY, n_audio_state=768, n_audio_head=12, n_audio_layer=12, n_text_state=768, n_text_head=12,
                  n_text_layer=12),
    "medium": dict(TINY, n_audio_state=1024, n_audio_head=16, n_audio_layer=24, n_text_state=1024,
                   n_text_head=16, n_text_layer=24),
    "large-v3": dict(TINY, n_mels=128, n_vocab=51866, n_audio_state=1280, n_audio_head=20, n_audio_layer=32,
                     n_text_state=1280, n_text_head=20, n_text_layer=32),
    "large-v3-turbo": dict(TINY, n_mels=128, n_vocab=51866, n_audio_state=1280, n_audio_head=20,
                           n_audio_layer=32, n_text_state=1280, n_text_head=20, n_text_layer=4),
}


def parameter_count(dims: dict) -> int:
    """Parameters of asrkit's ``model: whisper`` for ``dims`` (built on the meta device: no memory)."""
    import torch

    from asrkit.checkpoint.whisper import build_from_config, wenet_config
    from asrkit.models.ctc import CTC

    config = wenet_config(dims)
    with torch.device("meta"):
        model = build_from_config(config, "dims")
        ctc = CTC(dims["n_vocab"], dims["n_audio_state"], config["ctc_conf"]["ctc_blank_id"])
    tied = {id(p) for p in model.parameters()}
    return sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in ctc.parameters()
                                                            if id(p) not in tied)


def measure(size: str, batch: int, seconds: float) -> dict:
    """In this (fresh) process: peak RSS after building ``size`` at random weights, and after
    one training step of the converted model on random audio."""
    import torch

    from asrkit.checkpoint.whisper import wenet_config
    from asrkit.config import TrainConfig
    from asrkit.data.whisper_features import log_mel_spectrogram
    from asrkit.models.registry import build_model
    from asrkit.schema import build
    from asrkit.text.tokenizer import build_tokenizer

    def peak_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    torch.manual_seed(0)
    dims = SIZES[size]
    cfg = build(TrainConfig, wenet_config(dims))
    baseline = peak_mb()
    tokenizer = build_tokenizer(cfg)
    model = build_model(cfg, dims["n_mels"], tokenizer.vocabulary)
    built = peak_mb()
    audio = 0.1 * torch.randn(batch, int(seconds * 16000))
    feats = torch.stack([log_mel_spectrogram(a, dims["n_mels"]) for a in audio])
    lengths = torch.full((batch,), feats.size(1))
    text = torch.tensor([tokenizer.encode(" one two three four five six seven")] * batch)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)
    out = model(feats, lengths, text, torch.full((batch,), text.size(1)))
    (out["loss"] / out["num_utts"]).backward()
    optimizer.step()
    return {"baseline_mb": baseline, "built_mb": built, "step_mb": peak_mb(),
            "parameters": sum(p.numel() for p in model.parameters())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measure", nargs="*", default=["tiny", "base"], choices=list(SIZES))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker, args.batch, args.seconds)))
        return 0
    measured = {}
    for size in args.measure:
        done = subprocess.run([sys.executable, __file__, "--worker", size, "--batch", str(args.batch),
                               "--seconds", str(args.seconds)], capture_output=True, text=True, check=True)
        measured[size] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()}; batch {args.batch} x "
          f"{args.seconds:g} s")
    print("| size | parameters (with CTC head) | fp32 weights | bf16 weights | Adam fine-tuning, fp32 "
          "(16 B/param) | measured: built / after one training step (peak RSS) |")
    print("|---|---:|---:|---:|---:|---|")
    for size, dims in SIZES.items():
        n = parameter_count(dims)
        got = measured.get(size)
        seen = (f"{got['built_mb'] - got['baseline_mb']:,.0f} MB / {got['step_mb'] - got['baseline_mb']:,.0f} MB "
                f"above the process's {got['baseline_mb']:,.0f} MB" if got else "")
        print(f"| {size} | {n / 1e6:,.1f} M | {4 * n / 2**30:.2f} GiB | {2 * n / 2**30:.2f} GiB | "
              f"{16 * n / 2**30:.2f} GiB | {seen} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
