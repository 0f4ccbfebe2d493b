"""Test shim: records the chunk choice of every ``AsrModel.encode`` call, with what the
call encoded, so tests see which attention context the trainer gave which utterances.

In-process: ``monkeypatch.setattr(AsrModel, "encode", recording_encode(path))``.  For a
training subprocess (torchrun too): ``python -m tests.train.chunk_recorder PATH --
<asrkit.bin.train arguments>``.  Each call appends one JSON line to ``PATH``:
``{"rank", "training", "chunk": [chunk_size, num_left_chunks], "utts": [[frames, feature
sum], ...]}`` -- an utterance is named by its frame count and the exact sum of its
(pre-CMVN) features, which equal runs compute bit for bit.

The recorded call goes on to the model's own ``encode``: with the chunk arguments when that
``encode`` takes them (``chunk_size``, ``num_left_chunks``), so masks are applied and
weights show the chunks; with the features alone when it does not yet.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from asrkit.models.asr_model import AsrModel


def recording_encode(path: Path):
    """A replacement for ``AsrModel.encode`` that records each call to ``path`` (replacing a
    recorder already installed, not recording through it)."""
    original = getattr(AsrModel.encode, "recorded_original", AsrModel.encode)

    def encode(self, feats: torch.Tensor, feats_lengths: torch.Tensor, chunk_size: int = 0,
               num_left_chunks: int = -1):
        dist = torch.distributed
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        utts = [[int(n), float(feats[i, :int(n)].double().sum())] for i, n in enumerate(feats_lengths.tolist())]
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"rank": rank, "training": self.training, "chunk": [chunk_size, num_left_chunks],
                                "utts": utts}) + "\n")
        return original(self, feats, feats_lengths, chunk_size=chunk_size, num_left_chunks=num_left_chunks)

    encode.recorded_original = original
    return encode


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def chunk_of_each_utterance(records: list[dict], training: bool = True) -> dict:
    """``{(frames, feature sum): [chunk choices in call order]}`` of the training (or CV) calls."""
    out: dict = {}
    for r in records:
        if r["training"] == training:
            for utt in r["utts"]:
                out.setdefault(tuple(utt), []).append(tuple(r["chunk"]))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print("usage: python -m tests.train.chunk_recorder PATH -- <asrkit.bin.train arguments>", file=sys.stderr)
        return 2
    AsrModel.encode = recording_encode(Path(argv[0]))
    from asrkit.bin.train import main as train_main
    return train_main(argv[2:])


if __name__ == "__main__":
    from asrkit.train.entry import end_with
    end_with(lambda: main(sys.argv[1:]))  # (as asrkit.bin.train ends: exit_process says why)
