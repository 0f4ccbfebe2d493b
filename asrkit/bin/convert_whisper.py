"""Convert an OpenAI Whisper checkpoint into an asrkit experiment: WeNet's
``convert_whisper_to_wenet_config_and_ckpt.py`` with its options' names.

    python -m asrkit.bin.convert_whisper --whisper_ckpt tiny.pt --output_dir exp/whisper_tiny [--init_ctc]

Writes ``train.yaml`` (the config WeNet's converter writes for the file's dimensions:
``model: whisper``, Whisper's log-mel, tokenizer and special tokens) and ``whisper.pt``
(every weight under asrkit's names, a CTC head at its initialisation; ``--init_ctc``:
its weight the decoder's token embedding, WeNet's ``init-ctc`` checkpoint) into
``--output_dir``.  Fine-tune with ``asrkit.bin.train --config OUT/train.yaml --checkpoint
OUT/whisper.pt ...`` (data, schedule and batch overrides as usual), or decode it as it is
(``recognize``, ``asrkit transcribe --model OUT``).  A file that is not OpenAI's layout:
one line, exit status 2 (docs/whisper.md).
"""
from __future__ import annotations

import argparse
import logging
import sys

from asrkit.bin.exit_status import run_tool
from asrkit.files import UnwritableDestination, check_destination

log = logging.getLogger("asrkit.convert_whisper")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--whisper_ckpt", required=True, help="an OpenAI Whisper file (tiny.pt ... large-v3.pt, *.en.pt)")
    p.add_argument("--output_dir", required=True, help="where train.yaml and whisper.pt are written")
    p.add_argument("--init_ctc", action="store_true",
                   help="start the CTC head's weight from the decoder's token embedding (WeNet's init-ctc)")
    p.add_argument("--seed", type=int, default=0, help="seed of the CTC head's initialisation")
    return p


def run(args: argparse.Namespace) -> int:
    from asrkit.checkpoint.whisper import convert_openai_file  # (defers torch until the arguments parse)

    check_destination("--output_dir", args.output_dir, folder=True)
    config_path, checkpoint_path = convert_openai_file(args.whisper_ckpt, args.output_dir, seed=args.seed,
                                                       init_ctc=args.init_ctc)
    print(f"converted {args.whisper_ckpt} -> {config_path}, {checkpoint_path}"
          + (" (CTC head from the decoder's embedding)" if args.init_ctc else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_tool(run, build_parser().parse_args(argv), log, bad_input=(UnwritableDestination,))


if __name__ == "__main__":
    sys.exit(main())
