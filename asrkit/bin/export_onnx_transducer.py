"""The transducer branch of :mod:`asrkit.bin.export_onnx` (``model: transducer``): the
layout of sherpa-onnx's transducer recognizers, :mod:`asrkit.export.onnx_transducer`.

    python -m asrkit.bin.export_onnx --config exp/t/train.yaml --checkpoint exp/t/avg_3.pt \\
        --output_dir exp/t/onnx [--streaming true --chunk_size 16 --num_left_chunks 4]

writes ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` (``OfflineRecognizer.from_transducer``),
for a streaming model ``encoder-streaming.onnx`` (``OnlineRecognizer.from_transducer``, same
decoder and joiner; the chunk size and left chunks are fixed in it), ``*.int8.onnx`` and
``tokens.txt``.  A predictor ``rnn`` is refused (status 2): its state is not a token context.

sherpa-onnx's greedy search emits at most one symbol per frame.  ``--check_data`` (audio
files and/or data lists, the first :data:`CHECK_UTTERANCES` utterances) is speech on which
the export counts the frames where asrkit's ``rnnt_greedy_search`` emits more than one; if
any do, one warning line gives their share and the fix (train with ``model_conf.rnnt_type:
modified``).  Without it, a model of the regular lattice is warned about unmeasured, one of
the modified lattice (searched one symbol per frame by asrkit too) never.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import List, Tuple

import numpy as np

from asrkit.bin.export import refuse_streaming
from asrkit.data.audio import load_audio, resample
from asrkit.data.lists import AUDIO_EXTENSIONS, ListEntry, ListError, read_list
from asrkit.export.onnx_transducer import Fbank, export_transducer_onnx
from asrkit.models.chunks import ChunkTraining
from asrkit.models.transducer.predictor import RNNPredictor

log = logging.getLogger("asrkit.export_onnx")
CHECK_UTTERANCES = 100  # enough frames for a share; the check's greedy search runs in Python


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunk_size", type=int, default=16,
                   help="transducer streaming export: encoder frames per chunk (fixed in encoder-streaming.onnx)")
    p.add_argument("--num_left_chunks", type=int, default=4,
                   help="transducer streaming export: chunks of attention cache (>= 1)")
    p.add_argument("--check_data", nargs="+", default=[], metavar="PATH",
                   help="transducer export: speech (audio files and/or data lists, raw or shard; the first "
                        f"{CHECK_UTTERANCES} utterances) on which to count the frames where asrkit's greedy "
                        "search emits more than one symbol, which sherpa-onnx's cannot (warned with their share)")


def read_check_audio(paths: List[str], sample_rate: int) -> List[Tuple[np.ndarray, int]]:
    """The first :data:`CHECK_UTTERANCES` utterances of ``paths`` (an audio file each, by
    its extension, or a data list) as ``(samples, sample_rate)``, resampled to
    ``sample_rate``; a list without utterances is refused (``ListError``)."""
    entries: List[ListEntry] = []
    for path in paths:
        if Path(path).suffix.lower().lstrip(".") in AUDIO_EXTENSIONS:
            entries.append(ListEntry(key=path, txt="", duration=0.0, wav=path))
        else:
            entries.extend(read_list(path))
        if len(entries) >= CHECK_UTTERANCES:
            break
    if not entries:
        raise ListError(f"--check_data {' '.join(paths)}: no utterances")
    audio = []
    for entry in entries[:CHECK_UTTERANCES]:
        wav, rate = load_audio(entry)
        audio.append((resample(wav, rate, sample_rate)[0].numpy(), sample_rate))
    return audio


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
    check_audio = read_check_audio(args.check_data, fbank.sample_rate) if args.check_data else None
    summary = export_transducer_onnx(model, list(tokenizer.symbols), args.output_dir, fbank=fbank,
                                     feature_cmvn=feature_cmvn, streaming=chunked if args.streaming == "auto"
                                     else args.streaming == "true", chunk_size=args.chunk_size,
                                     num_left_chunks=args.num_left_chunks, int8=args.int8 == "true",
                                     verify=not args.no_verify, check_audio=check_audio)
    files = ", ".join(f"{name} ({size / 1e6:.1f} MB)" for name, size in summary["files"].items())
    checks = ", ".join(f"{name} {diff:.2g}" for name, diff in summary["max_abs_diff"].items())
    counts = summary["symbols_per_frame"]
    print(f"exported to {args.output_dir}: {files}, tokens.txt in {summary['seconds']:.1f} s"
          + (f"; max |diff| vs eager under onnxruntime: {checks}" if checks else "")
          + (f"; greedy search on {counts['utterances']} check utterances: {counts['multi_symbol_frames']} of "
             f"{counts['frames']} frames with more than one symbol" if counts else ""))
    if summary["search_mismatch"]:
        log.warning("%s", summary["search_mismatch"])
    if summary["feature_mismatch"]:
        print("note: OfflineRecognizer.from_transducer computes " + ", ".join(summary["feature_mismatch"])
              + "; a graph cannot undo that (train with kaldi-native-fbank's defaults to match)")
    return 0
