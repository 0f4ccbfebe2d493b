"""The ``asrkit`` command: ``asrkit SUBCOMMAND ...``.

Subcommands live in :data:`SUBCOMMANDS`; a new one is one :func:`register` call with its
argument set-up and its ``run(args) -> exit status`` (import heavy modules inside
``run``, so that ``asrkit --help`` stays fast).

``asrkit transcribe WAV... --model EXP_DIR_OR_FINAL_ZIP [--mode M] [--chunk N] [--json]
[--min_pause_s S] [--max_segment_s S] [--no_vad]`` prints ``path<TAB>text`` per file, or with
``--json`` one JSON object per line (path, text, tokens, token times, word times, segments;
docs/transcribe.md); progress goes to stderr (a bar on a terminal, else a line every 30 s
of work on a long file).  A file that cannot
be transcribed (missing, not audio, empty, too short) is one ``error: PATH: reason`` line
on stderr and the other files are still transcribed; the exit status is then 2.  A model
that cannot be loaded or an option it cannot run (an LM file that is not ARPA, an empty
phrase list, a phrase the model's units cannot spell among them) is one line and status 2 before any file
(a decoding option out of range before the model loads; ``--chunk`` on a model trained
with full context only is refused, as ``export_onnx --streaming true`` refuses it).

``asrkit doctor [--num_nodes N --node_rank I --master_addr A --master_port P ...]`` is the
preflight to run on every node before a multi-node job (``asrkit.bin.doctor``, docs/doctor.md).
``asrkit serve --model M`` is the streaming recognition server (``asrkit.bin.serve``, docs/serve.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from typing import Callable, Optional

from asrkit.bin import doctor, serve
from asrkit.bin.search_args import add_search_args, search_options
from asrkit.decode.options import AUTOCAST_DTYPES, DEFAULTS
from asrkit.progress import AudioProgress

log = logging.getLogger("asrkit.transcribe")

@dataclasses.dataclass(frozen=True)
class Subcommand:
    name: str
    summary: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


SUBCOMMANDS: dict[str, Subcommand] = {}


def register(command: Subcommand) -> Subcommand:
    """Add ``command`` to :data:`SUBCOMMANDS` (a name may be registered once)."""
    if command.name in SUBCOMMANDS:
        raise ValueError(f"subcommand {command.name} is already registered")
    SUBCOMMANDS[command.name] = command
    return command


# ----------------------------------------------------------------------------- transcribe


def configure_transcribe(p: argparse.ArgumentParser) -> None:
    p.add_argument("wavs", nargs="+", metavar="WAV", help="audio files (WAV, FLAC, ...; any sample rate)")
    p.add_argument("--model", default=os.environ.get("ASRKIT_MODEL"),
                   help="experiment directory (train.yaml + checkpoint) or exported final.zip "
                        "(default: $ASRKIT_MODEL)")
    p.add_argument("--checkpoint", default=None,
                   help="experiment only: checkpoint (default: avg_<N>.pt with the largest N, else final.pt, "
                        "else the newest epoch_/step_ checkpoint by recorded step)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="experiment only: override a train.yaml value (repeatable)")
    p.add_argument("--mode", default=DEFAULTS["modes"][0],
                   help="decoding mode: any registered one the model runs (asrkit.decode.MODES; recognize --help "
                        "lists them)")
    p.add_argument("--chunk", type=int, default=None,
                   help="decode with chunks of N encoder frames (streaming models; default: full context)")
    p.add_argument("--left_chunks", type=int, default=DEFAULTS["num_decoding_left_chunks"],
                   help="with --chunk: left chunks seen (-1: all)")
    p.add_argument("--beam_size", type=int, default=DEFAULTS["beam_size"])
    p.add_argument("--ctc_weight", type=float, default=DEFAULTS["ctc_weight"])
    p.add_argument("--reverse_weight", type=float, default=DEFAULTS["reverse_weight"])
    add_search_args(p)
    p.add_argument("--min_pause_s", type=float, default=0.15,
                   help="cut the audio where speech pauses this long (the voice-activity detector) and decode "
                        "the parts one by one; audio without speech gives empty text")
    p.add_argument("--max_segment_s", type=float, default=20.0,
                   help="the longest part: longer speech is split at its longest inner pause")
    p.add_argument("--no_vad", action="store_true",
                   help="no voice-activity detection: decode each file whole (in --max_segment_s pieces "
                        "when longer; such cuts may fall inside words)")
    p.add_argument("--json", action="store_true", help="one JSON object per line, with times")
    p.add_argument("--dtype", choices=list(AUTOCAST_DTYPES), default=DEFAULTS["dtype"],
                   help="precision of the model passes (autocast; CTC scores stay fp32)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--num_threads", type=int, default=0, help="intra-op threads (0: torch default)")


def _segmentation(args: argparse.Namespace):
    """The :class:`asrkit.transcribe.Segmentation` of the options."""
    from asrkit.transcribe import Segmentation  # (deferred: torch, as the module docstring says)
    return Segmentation(vad=not args.no_vad, min_pause_s=args.min_pause_s, max_segment_s=args.max_segment_s)


def run_transcribe(args: argparse.Namespace) -> int:
    import torch  # (these defer torch and the models, as the module docstring says)

    from asrkit.decode import DecodingOptionError, DecodingOptions, ModeError
    from asrkit.decode.context_graph import ContextListError
    from asrkit.config_files import BAD_INPUT
    from asrkit.lm.arpa import ArpaError
    from asrkit.transcribe import AudioError, ModelLoadError, SegmentationError, load_model
    from asrkit.transcribe.vad import VadUnavailableError

    if not args.model:
        print("error: no model: pass --model EXP_DIR_OR_FINAL_ZIP (or set ASRKIT_MODEL)", file=sys.stderr)
        return 2
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)  # progress lines
    try:  # the options first: a bad one is refused before the model loads
        segmentation = _segmentation(args)
        options = DecodingOptions(modes=(args.mode,), beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                                  reverse_weight=args.reverse_weight, decoding_chunk_size=args.chunk or 0,
                                  num_decoding_left_chunks=args.left_chunks, dtype=args.dtype,
                                  **search_options(args))
    except (ModeError, DecodingOptionError, SegmentationError, ContextListError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    try:
        model = load_model(args.model, args.checkpoint, args.device, args.override)
        model.check_options(options)
        model.fusion(options)  # (the LM file and the phrases' units, checked before any audio)
    except (ModeError, DecodingOptionError, ArpaError, ContextListError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except (ModelLoadError, *BAD_INPUT) as e:
        message = _one_line(e)
        print(f"error: {message}" if args.model in message else f"error: {args.model}: {message}", file=sys.stderr)
        return 2
    failed = 0
    for number, wav in enumerate(args.wavs, 1):
        desc = f"[{number}/{len(args.wavs)}] {os.path.basename(wav)}" if len(args.wavs) > 1 else os.path.basename(wav)
        progress = AudioProgress(desc, log)
        try:
            result = model.transcribe_with_options(wav, options, segmentation=segmentation, progress=progress)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            failed += 1
            continue
        except (ModeError, DecodingOptionError, VadUnavailableError) as e:  # the same for every file: stop here
            print(f"error: {_one_line(e)}", file=sys.stderr)
            return 2
        finally:
            progress.close()
        if args.json:
            print(json.dumps({"path": wav, **result.to_dict()}, ensure_ascii=False), flush=True)
        else:
            print(f"{wav}\t{result.text}", flush=True)
    return 2 if failed else 0


def _one_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


register(Subcommand("transcribe", "transcribe audio files (text, or JSON with token and word times)",
                    configure_transcribe, run_transcribe))


register(Subcommand("doctor", doctor.SUMMARY, doctor.configure, doctor.run))
register(Subcommand("serve", serve.SUMMARY, serve.configure, serve.run))


# ----------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asrkit", description="asrkit command-line tools")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    for command in SUBCOMMANDS.values():
        child = sub.add_parser(command.name, help=command.summary, description=command.summary)
        command.configure(child)
        child.set_defaults(run=command.run)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
