"""Export a trained CTC model as ONNX for sherpa-onnx.

    python -m asrkit.bin.export_onnx --config exp/x/train.yaml \\
        --checkpoint exp/x/avg_5.pt --output_dir exp/x/onnx

writes into ``--output_dir``: ``model.onnx`` (offline, for
``sherpa_onnx.OfflineRecognizer.from_wenet_ctc``), for a streaming model (dynamic-chunk
or static-chunk training) ``model-streaming.onnx`` (for
``sherpa_onnx.OnlineRecognizer.from_wenet_ctc``; the chunk size and number of left chunks
are the recognizer's arguments), ``*.int8.onnx`` (dynamic int8 quantization; ``--int8
false`` skips it) and ``tokens.txt``.  CMVN is inside the models: they take raw fbank.
Each fp32 file is checked against eager asrkit under onnxruntime before it is kept
(``--no_verify`` skips that).  A model without a CTC head is refused.  The metadata
records the model's filterbank (``fbank_conf``); a model trained on other features than
sherpa-onnx computes (kaldi-native-fbank: ``snip_edges`` false, top mel edge at Nyquist −
400 Hz) is exported with a one-line warning saying what to set in ``fbank_conf``: its
transcripts in sherpa-onnx would differ from asrkit's, and
:mod:`asrkit.export.sherpa` refuses it.
A transducer (``model: transducer``) is written in sherpa-onnx's transducer layout instead
(encoder/decoder/joiner, :mod:`asrkit.bin.export_onnx_transducer`; it warns in one line when
sherpa-onnx's one-symbol-per-frame search can give other transcripts, counted on
``--check_data``).  An ``--output_dir`` that cannot be created or written is refused in one
line before anything is read.
Exit status 0 on success, 1 on a clear error, 2 on bad usage.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from asrkit.bin import export_onnx_transducer
from asrkit.bin.exit_status import run_tool
from asrkit.bin.export import add_model_args, load_for_export, refuse_streaming
from asrkit.data.audio import DataFault
from asrkit.export.onnx import FBANK_DEFAULTS, export_onnx
from asrkit.export.runtime_features import UnexportableModel, runtime_feature_mismatch
from asrkit.files import UnwritableDestination, check_destination
from asrkit.models.chunks import ChunkTraining
from asrkit.models.transducer.model import Transducer

log = logging.getLogger("asrkit.export_onnx")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.add_argument("--output_dir", required=True, help="folder for model*.onnx and tokens.txt")
    p.add_argument("--streaming", choices=["auto", "true", "false"], default="auto",
                   help="also write model-streaming.onnx; auto: when the model was trained with chunks "
                        "(use_dynamic_chunk or static_chunk_size)")
    p.add_argument("--int8", choices=["true", "false"], default="true",
                   help="also write int8 dynamically quantized copies (*.int8.onnx)")
    export_onnx_transducer.add_args(p)
    return p


def run(args: argparse.Namespace) -> int:
    check_destination("--output_dir", args.output_dir, folder=True)
    loaded = load_for_export(args)
    cfg, tokenizer, model, feature_cmvn = loaded.cfg, loaded.tokenizer, loaded.model, loaded.feature_cmvn
    if isinstance(model, Transducer):  # sherpa-onnx's transducer layout (asrkit/bin/export_onnx_transducer.py)
        return export_onnx_transducer.run(args, cfg, tokenizer, model, feature_cmvn)
    if model.ctc is None:
        log.error("the model has no CTC head (ctc_weight 0): sherpa-onnx's WeNet CTC models are CTC "
                  "log-posteriors, so there is nothing to export; use the TorchScript export")
        return 2
    chunked = ChunkTraining.from_config(cfg).chunked
    if refuse_streaming(args, chunked):
        return 2
    streaming = chunked if args.streaming == "auto" else args.streaming == "true"
    fbank = cfg.dataset_conf.fbank_conf
    rate = cfg.dataset_conf.resample_conf.resample_rate
    problem = runtime_feature_mismatch(dict(FBANK_DEFAULTS, sample_rate=rate, frame_length_ms=fbank.frame_length,
                                            frame_shift_ms=fbank.frame_shift, snip_edges=fbank.snip_edges,
                                            high_freq=fbank.high_freq, sample_scale=fbank.sample_scale))
    if problem:
        log.warning("%s; exporting anyway: sherpa-onnx transcripts will not be asrkit's "
                    "(asrkit.export.sherpa refuses these files)", problem)
    summary = export_onnx(model, list(tokenizer.symbols), Path(args.output_dir),
                          num_mel_bins=fbank.num_mel_bins, sample_rate=rate, frame_length=fbank.frame_length,
                          frame_shift=fbank.frame_shift, snip_edges=fbank.snip_edges, high_freq=fbank.high_freq,
                          sample_scale=fbank.sample_scale, feature_cmvn=feature_cmvn,
                          streaming=streaming, int8=args.int8 == "true", verify=not args.no_verify)
    files = ", ".join(f"{name} ({size / 1e6:.1f} MB)" for name, size in summary["files"].items())
    checks = ", ".join(f"{name} {diff:.2g}" for name, diff in summary["max_abs_diff"].items())
    print(f"exported to {args.output_dir}: {files}, tokens.txt in {summary['seconds']:.1f} s"
          + (f"; max |log-prob diff| vs eager under onnxruntime: {checks}" if checks else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    hint = "ONNX export needs onnx and onnxruntime (pip install -r requirements.txt)"
    return run_tool(run, build_parser().parse_args(argv), log,
                    bad_input=(UnwritableDestination, DataFault, UnexportableModel),
                    hints={ImportError: hint})


if __name__ == "__main__":
    sys.exit(main())
