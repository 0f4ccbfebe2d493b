"""The transducer branch of :mod:`asrkit.bin.export_onnx` (``model: transducer``): the
layout of sherpa-onnx's transducer recognizers, :mod:`asrkit.export.onnx_transducer`.

    python -m asrkit.bin.export_onnx --config exp/t/train.yaml --checkpoint exp/t/avg_3.pt \\
        --output_dir exp/t/onnx [--streaming true --chunk_size 16 --num_left_chunks 4]

writes ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` (``OfflineRecognizer.from_transducer``),
for a streaming model ``encoder-streaming.onnx`` (``OnlineRecognizer.from_transducer``, same
decoder and joiner; the chunk size and left chunks are fixed in it), ``*.int8.onnx`` and
``tokens.txt``.  A predictor ``rnn`` is refused (status 2): its state is not a token context.
"""
from __future__ import annotations

import argparse
import logging

from asrkit.bin.export import refuse_streaming
from asrkit.export.onnx_transducer import Fbank, export_transducer_onnx
from asrkit.models.chunks import ChunkTraining
from asrkit.models.transducer.predictor import RNNPredictor

log = logging.getLogger("asrkit.export_onnx")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunk_size", type=int, default=16,
                   help="transducer streaming export: encoder frames per chunk (fixed in encoder-streaming.onnx)")
    p.add_argument("--num_left_chunks", type=int, default=4,
                   help="transducer streaming export: chunks of attention cache (>= 1)")


def run(args: argparse.Namespace, cfg, tokenizer, model, feature_cmvn) -> int:
    if isinstance(model.predictor, RNNPredictor):
        log.error("predictor: rnn cannot be exported for sherpa-onnx: its state is a recurrent hidden state, not "
                  "a fixed context of tokens (sherpa-onnx feeds the decoder the last context_size tokens); train "
                  "a stateless predictor (embedding or conv), or use the TorchScript export")
        return 2
    chunked = ChunkTraining.from_config(cfg).chunked
    if refuse_streaming(args, chunked):
        return 2
    if args.chunk_size < 1 or args.num_left_chunks < 1:
        log.error("--chunk_size and --num_left_chunks must be >= 1 (sherpa-onnx's conformer layout keeps a "
                  "fixed left context)")
        return 2
    fbank = Fbank.from_config(cfg)
    summary = export_transducer_onnx(model, list(tokenizer.symbols), args.output_dir, fbank=fbank,
                                     feature_cmvn=feature_cmvn, streaming=chunked if args.streaming == "auto"
                                     else args.streaming == "true", chunk_size=args.chunk_size,
                                     num_left_chunks=args.num_left_chunks, int8=args.int8 == "true",
                                     verify=not args.no_verify)
    files = ", ".join(f"{name} ({size / 1e6:.1f} MB)" for name, size in summary["files"].items())
    checks = ", ".join(f"{name} {diff:.2g}" for name, diff in summary["max_abs_diff"].items())
    print(f"exported to {args.output_dir}: {files}, tokens.txt in {summary['seconds']:.1f} s"
          + (f"; max |diff| vs eager under onnxruntime: {checks}" if checks else ""))
    if summary["feature_mismatch"]:
        print("note: OfflineRecognizer.from_transducer computes " + ", ".join(summary["feature_mismatch"])
              + "; a graph cannot undo that (train with kaldi-native-fbank's defaults to match)")
    return 0
