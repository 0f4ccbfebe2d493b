"""Compare sherpa-onnx's transducer recognizers with asrkit on a data list.

    python -m asrkit.bin.compare_sherpa_transducer --config exp/t/train.yaml \\
        --checkpoint exp/t/avg_3.pt --onnx_dir exp/t/onnx --data_list data/test/data.list \\
        [--streaming] [--int8]

The ONNX files are those of ``asrkit.bin.export_onnx`` for the same checkpoint.  Prints one
JSON line: the utterances, how many sherpa-onnx transcribes with exactly asrkit's tokens
(asrkit's one-symbol-per-frame greedy search on the features the runtime computes), the
CER of each, and the same count and CER for asrkit decoding its training features
(:func:`asrkit.export.sherpa_transducer.compare`).  Exit status 0, 1 on a clear error,
2 on bad usage.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from asrkit.bin.exit_status import run_tool
from asrkit.bin.export import add_model_args, load_for_export
from asrkit.export.onnx_transducer import Fbank
from asrkit.export.sherpa_transducer import compare

log = logging.getLogger("asrkit.compare_sherpa_transducer")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.add_argument("--onnx_dir", required=True, help="the folder asrkit.bin.export_onnx wrote")
    p.add_argument("--data_list", required=True, help="data.list: JSON lines with key, wav, txt")
    p.add_argument("--streaming", action="store_true", help="OnlineRecognizer with encoder-streaming.onnx")
    p.add_argument("--int8", action="store_true", help="the *.int8.onnx files")
    p.add_argument("--limit", type=int, default=0, help="only the first N utterances (0: all)")
    return p


def run(args: argparse.Namespace) -> int:
    loaded = load_for_export(args)
    cfg, model, feature_cmvn = loaded.cfg, loaded.model, loaded.feature_cmvn
    lines = Path(args.data_list).read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines if line.strip()]
    items = items[:args.limit] if args.limit > 0 else items
    result = compare(model.eval(), Path(args.onnx_dir), items, args.streaming, args.int8, feature_cmvn,
                     Fbank.from_config(cfg))
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_tool(run, build_parser().parse_args(argv), log,
                    hints={ImportError: "the comparison needs onnx, onnxruntime and sherpa-onnx"})


if __name__ == "__main__":
    sys.exit(main())
