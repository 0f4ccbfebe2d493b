#!/usr/bin/env python3
"""Peak memory of the transducer's joint + RNN-T loss, forward and backward, on CPU.

    python bench/transducer_joint_memory.py [--sizes B,T,U,V,J ...] [--dtype fp32|bf16]
                                            [--rnnt_type regular|modified]

For each size, a fresh process builds asrkit's ``TransducerJoint`` (``enc_ffn``,
``pred_ffn``: E = P = 256 -> J; tanh; ``ffn_out``: J -> V), random encoder ``[B, T, 256]`` and
predictor ``[B, U+1, 256]`` outputs that require gradients and targets of U tokens, then runs
``joint`` + ``asrkit.models.transducer.loss.rnnt_loss`` forward and backward once, under bf16
autocast with ``--dtype bf16``; the loss in ``--rnnt_type`` (``model_conf.rnnt_type``):
``regular`` (default) is torchaudio's, ``modified`` asrkit's one-output-per-frame
``modified_rnnt_loss`` (torch ops, a loop over T), both in fp32.  Reported (one JSON line per size):
the peak resident memory the step added (``ru_maxrss`` at the end minus the resident memory
just before it, MiB), and the size of one ``[B, T, U+1, V]`` fp32 tensor and of one
``[B, T, U+1, J]`` fp32 tensor (MiB) to compare it with.  The encoder, predictor and
decoder are not run: the joint's 4-dimensional tensors are what grows with B·T·U.
Results: ``docs/experiments/transducer_joint_memory.md``.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

MIB = 2 ** 20
DEFAULT_SIZES = ["4,100,20,500,256", "4,100,20,2000,256", "8,100,20,2000,256", "4,200,20,2000,256",
                 "4,100,40,2000,256", "4,100,20,2000,512", "8,200,40,500,256"]


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / MIB


def one(size: str, dtype: str, rnnt_type: str = "regular") -> dict:
    """Run one size in this process (see the module docstring)."""
    from asrkit.models.transducer.joint import TransducerJoint
    from asrkit.models.transducer.loss import rnnt_loss

    b, t, u, v, j = (int(x) for x in size.split(","))
    torch.manual_seed(0)
    joint = TransducerJoint(v, 256, 256, j)
    enc = torch.randn(b, t, 256, requires_grad=True)
    pred = torch.randn(b, u + 1, 256, requires_grad=True)
    target = torch.randint(1, v, (b, u))
    lengths, target_lengths = torch.full((b,), t), torch.full((b,), u)
    before = resident_mib()
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        loss = rnnt_loss(joint(enc, pred), target, lengths, target_lengths, blank=0, rnnt_type=rnnt_type).sum()
    loss.backward()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # (KiB on Linux)
    cells = b * t * (u + 1)
    return {"B": b, "T": t, "U": u, "V": v, "J": j, "dtype": dtype, "rnnt_type": rnnt_type,
            "peak_added_mib": round(peak - before, 1),
            "logits_fp32_mib": round(4 * cells * v / MIB, 1), "hidden_fp32_mib": round(4 * cells * j / MIB, 1),
            "seconds": round(seconds, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, help="B,T,U,V,J per run")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--rnnt_type", choices=("regular", "modified"), default="regular",
                        help="the loss: torchaudio's (regular) or asrkit's modified_rnnt_loss")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # (internal: run this size here)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.dtype, args.rnnt_type)), flush=True)
        return 0
    for size in args.sizes:  # a fresh process each: ru_maxrss only grows
        proc = subprocess.run([sys.executable, __file__, "--one", size, "--dtype", args.dtype,
                               "--rnnt_type", args.rnnt_type],
                              capture_output=True, text=True)
        if proc.returncode:
            print(proc.stderr[-2000:], file=sys.stderr)
            return proc.returncode
        print(proc.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
