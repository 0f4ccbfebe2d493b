"""``asrkit serve --model EXP_DIR_OR_FINAL_ZIP [--host H] [--port P] [--certfile F --keyfile K]``:
a streaming recognition server on one port (docs/serve.md): WeNet's websocket protocol at
``/``, a page with microphone and file upload at ``GET /``, ``POST /transcribe`` for files.

A chunk-trained model is streamed chunk by chunk (``--chunk``); a model trained with full
context only has its endpointed segments decoded whole.  Bad options (no model, a port out of
range, a TLS file missing, a model that cannot be loaded, a port in use) are one ``error:``
line and exit status 2; SIGTERM or Ctrl-C stops it gracefully (status 0).
"""
from __future__ import annotations

import argparse
import os
import sys

from asrkit.decode.options import DEFAULTS  # (no torch: `asrkit --help` stays fast)

SUMMARY = "a streaming recognition server: WeNet's websocket protocol, a browser page, file uploads"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=os.environ.get("ASRKIT_MODEL"),
                   help="experiment directory (train.yaml + checkpoint) or exported final.zip (default: $ASRKIT_MODEL)")
    p.add_argument("--checkpoint", default=None, help="experiment only: checkpoint (default as asrkit transcribe)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="experiment only: override a train.yaml value (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=10086, help="port (WeNet's default 10086; 0: a free one)")
    p.add_argument("--certfile", default=None, help="TLS certificate (PEM): serve https/wss (browsers give a page "
                                                    "the microphone only on localhost or over https)")
    p.add_argument("--keyfile", default=None, help="TLS private key (PEM), with --certfile")
    p.add_argument("--mode", default=DEFAULTS["modes"][0],
                   help="decoding mode of final results: a registered one the model runs (asrkit.decode.MODES; "
                        "a chunk-trained model's, one a stream runs)")
    p.add_argument("--chunk", type=int, default=16, help="chunk-trained models: encoder frames per chunk")
    p.add_argument("--left_chunks", type=int, default=DEFAULTS["num_decoding_left_chunks"],
                   help="chunk-trained models: left chunks seen (-1: all)")
    p.add_argument("--beam_size", type=int, default=DEFAULTS["beam_size"])
    p.add_argument("--ctc_weight", type=float, default=DEFAULTS["ctc_weight"])
    p.add_argument("--reverse_weight", type=float, default=DEFAULTS["reverse_weight"])
    p.add_argument("--partial_interval_s", type=float, default=0.5,
                   help="full-context models: re-decode the segment for a partial result every this many "
                        "seconds of audio")
    p.add_argument("--workers", type=int, default=2, help="decoding threads (streams decoded at once)")
    p.add_argument("--threads_per_worker", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--max_batch", type=int, default=8,
                   help="chunk-trained models: streams' chunks run through the encoder together, up to this "
                        "many (1: each stream alone)")
    p.add_argument("--batch_window_ms", type=float, default=5.0,
                   help="with --max_batch > 1: how long a chunk waits for other streams' chunks to join it")
    p.add_argument("--max_connections", type=int, default=256)
    p.add_argument("--idle_timeout_s", type=float, default=30.0,
                   help="close a connection that sends nothing for this long")
    p.add_argument("--max_message_kb", type=int, default=256, help="largest websocket message (256 KB: 8 s of audio)")
    p.add_argument("--max_upload_mb", type=int, default=100, help="largest uploaded file")
    p.add_argument("--grace_s", type=float, default=10.0, help="on SIGTERM, streams get this long to finish")
    p.add_argument("--device", default="cpu")


def _check(args: argparse.Namespace) -> None:
    if not args.model:
        raise ValueError("no model: pass --model EXP_DIR_OR_FINAL_ZIP (or set ASRKIT_MODEL)")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    if (args.certfile is None) != (args.keyfile is None):
        raise ValueError("--certfile and --keyfile go together")
    for name in ("certfile", "keyfile"):
        path = getattr(args, name)
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"--{name} {path}: no such file")
    for name in ("workers", "threads_per_worker", "max_batch", "max_connections", "max_message_kb", "max_upload_mb"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    for name in ("idle_timeout_s", "grace_s"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name} must be > 0, got {getattr(args, name)}")
    if not 0 <= args.batch_window_ms <= 1000:
        raise ValueError(f"--batch_window_ms must be in [0, 1000], got {args.batch_window_ms}")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import ssl

    # (these defer torch, the models and websockets: `asrkit --help` stays fast)
    from asrkit.config_files import BAD_INPUT
    from asrkit.serve import RecognitionServer, ServedModel, ServerLimits, ServeSettings, SettingsError
    from asrkit.transcribe import ModelLoadError, load_model

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("websockets").setLevel(logging.WARNING)
    try:
        _check(args)
        settings = ServeSettings(mode=args.mode, chunk=args.chunk, left_chunks=args.left_chunks,
                                 beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                                 reverse_weight=args.reverse_weight, partial_interval_s=args.partial_interval_s)
        context = None
        if args.certfile:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(args.certfile, args.keyfile)
        served = ServedModel(load_model(args.model, args.checkpoint, args.device, args.override), settings)
    except (ValueError, SettingsError, ModelLoadError, ssl.SSLError, *BAD_INPUT) as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    limits = ServerLimits(max_connections=args.max_connections, idle_timeout_s=args.idle_timeout_s,
                          max_message_bytes=args.max_message_kb * 1024, max_upload_bytes=args.max_upload_mb << 20,
                          grace_s=args.grace_s)
    server = RecognitionServer(served, args.host, args.port, workers=args.workers,
                               threads_per_worker=args.threads_per_worker, limits=limits, ssl_context=context,
                               max_batch=args.max_batch, batch_window_s=args.batch_window_ms / 1000.0)
    try:
        asyncio.run(server.run_until_signal())
    except OSError as e:  # (the port in use, an address not here)
        print(f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="asrkit serve", description=SUMMARY)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
