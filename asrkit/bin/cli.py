"""The ``asrkit`` command: ``asrkit SUBCOMMAND ...``.

Subcommands live in :data:`SUBCOMMANDS`; a new one is one :func:`register` call with its
argument set-up and its ``run(args) -> exit status`` (import heavy modules inside
``run``, so that ``asrkit --help`` stays fast).

``asrkit transcribe WAV... --model EXP_DIR_OR_FINAL_ZIP [--mode M] [--chunk N] [--json]
[--cut_at_pauses S]`` prints ``path<TAB>text`` per file, or with ``--json`` one JSON object
per line (path, text, tokens, token times, word times, segments; docs/transcribe.md).  A file that cannot
be transcribed (missing, not audio, empty, too short) is one ``error: PATH: reason`` line
on stderr and the other files are still transcribed; the exit status is then 2.  A model
that cannot be loaded or an option it cannot run is one line and status 2 before any file
(a decoding option out of range before the model loads; ``--chunk`` on a model trained
with full context only is refused, as ``export_onnx --streaming true`` refuses it).

``asrkit doctor [--num_nodes N --node_rank I --master_addr A --master_port P ...]`` is the
preflight to run on every node before a multi-node job (``asrkit.bin.doctor``, docs/doctor.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Callable, Optional

from asrkit.bin import doctor

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
    p.add_argument("--mode", default="attention_rescoring",
                   help="ctc_greedy_search, ctc_prefix_beam_search, attention or attention_rescoring "
                        "(any registered decoding mode the model can run)")
    p.add_argument("--chunk", type=int, default=None,
                   help="decode with chunks of N encoder frames (streaming models; default: full context)")
    p.add_argument("--left_chunks", type=int, default=-1, help="with --chunk: left chunks seen (-1: all)")
    p.add_argument("--beam_size", type=int, default=10)
    p.add_argument("--ctc_weight", type=float, default=0.3)
    p.add_argument("--reverse_weight", type=float, default=0.0)
    p.add_argument("--long_audio_s", type=float, default=30.0,
                   help="audio longer than this is cut at endpoints and decoded part by part")
    p.add_argument("--cut_at_pauses", type=float, default=None, metavar="S",
                   help="cut audio of any length at S seconds of silence after speech and decode the parts "
                        "one by one; 0: never (only audio longer than --long_audio_s, at endpoints); "
                        "default: 0.25 for a model trained with chunks (U2/U2++) and a CTC head, else 0")
    p.add_argument("--json", action="store_true", help="one JSON object per line, with times")
    p.add_argument("--device", default="cpu")
    p.add_argument("--num_threads", type=int, default=0, help="intra-op threads (0: torch default)")


def _segmentation(model, cut_at_pauses, long_audio_s: float):
    """``--cut_at_pauses``: ``None`` the model's default, ``0`` only long audio, ``S`` at ``S`` s pauses."""
    from asrkit.transcribe import Segmentation  # (deferred: torch, as the module docstring says)
    if cut_at_pauses is None:
        return model.default_segmentation(long_audio_s)
    if cut_at_pauses <= 0:
        return Segmentation(threshold_s=long_audio_s)
    return Segmentation.at_pauses(cut_at_pauses)


def run_transcribe(args: argparse.Namespace) -> int:
    import torch  # (these defer torch and the models, as the module docstring says)

    from asrkit.decode import DecodingOptionError, DecodingOptions, ModeError
    from asrkit.inputs import BAD_INPUT
    from asrkit.transcribe import AudioError, ModelLoadError, load_model

    if not args.model:
        print("error: no model: pass --model EXP_DIR_OR_FINAL_ZIP (or set ASRKIT_MODEL)", file=sys.stderr)
        return 2
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    try:  # the options first: a bad one is refused before the model loads
        options = DecodingOptions(modes=(args.mode,), beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                                  reverse_weight=args.reverse_weight, decoding_chunk_size=args.chunk or 0,
                                  num_decoding_left_chunks=args.left_chunks)
    except (ModeError, DecodingOptionError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    try:
        model = load_model(args.model, args.checkpoint, args.device, args.override)
        model.check_options(options)
    except (ModeError, DecodingOptionError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except (ModelLoadError, *BAD_INPUT) as e:
        message = _one_line(e)
        print(f"error: {message}" if args.model in message else f"error: {args.model}: {message}", file=sys.stderr)
        return 2
    segmentation = _segmentation(model, args.cut_at_pauses, args.long_audio_s)
    failed = 0
    for wav in args.wavs:
        try:
            result = model.transcribe_with_options(wav, options, segmentation=segmentation)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            failed += 1
            continue
        except (ModeError, DecodingOptionError) as e:  # the same for every file: stop here
            print(f"error: {_one_line(e)}", file=sys.stderr)
            return 2
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
