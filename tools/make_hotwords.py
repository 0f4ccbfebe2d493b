#!/usr/bin/env python3
"""A phrase list (``--context_list_path``, one phrase per line) as sherpa-onnx's hotwords
file for a model exported with ``asrkit.bin.export_onnx``: each phrase spelled in the
model's units (the symbols of its ``tokens.txt``), separated by spaces -- the format every
sherpa-onnx version reads, without ``--modeling-unit`` / ``--bpe-vocab``.

    python tools/make_hotwords.py --config exp/t/train.yaml phrases.txt exp/t/onnx/hotwords.txt
    # then, for a transducer: sherpa-onnx(-offline) ... --decoding-method=modified_beam_search \\
    #     --hotwords-file=exp/t/onnx/hotwords.txt --hotwords-score=3.0

The units come from the experiment's tokenizer (``train.yaml``'s units and BPE model), the
same spelling ``recognize --context_list_path`` biases with; a phrase the units cannot spell
(a unit the model does not have) is refused in one line, exit 2.  sherpa-onnx applies
hotwords only to transducer models, in ``modified_beam_search``; its ``--hotwords-score`` is
the bonus per matched unit, ``--context_graph_score`` here (docs/decoding.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asrkit.config import load_config
from asrkit.decode.context_graph import ContextListError, read_phrase_list, tokenize_phrases
from asrkit.config_files import BAD_INPUT, load_text_inputs
from asrkit.files import atomic_write_text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the experiment's train.yaml (its units and BPE model)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("phrases", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args(argv)
    try:
        phrases = read_phrase_list(args.phrases)
        tokenizer = load_text_inputs(load_config(args.config, args.override), model_cmvn=False)
        spelled = tokenize_phrases(phrases, tokenizer, str(args.phrases))
    except (ContextListError, *BAD_INPUT) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    lines = [" ".join(tokenizer.symbols[u] for u in units) for units in spelled]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print(f"{args.out}: {len(lines)} hotwords")
    return 0


if __name__ == "__main__":
    sys.exit(main())
