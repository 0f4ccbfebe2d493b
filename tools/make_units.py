#!/usr/bin/env python3
"""Build the modelling units (``units.txt``) from training transcripts.

Input: a Kaldi ``text`` file (``<key> <transcript>`` per line) or a raw ``data.list``
(JSON lines; the ``txt`` field is used) -- detected per line by a leading ``{``.

Char units (default): every character the char tokenizer produces (CJK-aware space
handling, ``▁`` for the space between non-CJK words; with ``--split-with-space`` every
whitespace-separated field is one unit instead).

``--bpe N``: trains a sentencepiece model of N pieces (``--bpe-type bpe|unigram``) on
the non-CJK runs of the transcripts, writes it to ``--bpe-model``, and lists its pieces
plus every CJK character of the text as units (CJK characters are single units, as
the BPE tokenizer produces them).  A corpus too small for N pieces gets fewer, with a
note (sentencepiece's soft vocabulary limit).

Output follows the units contract in asrkit's layout: ``<blank> 0``, ``<unk> 1``, the
units sorted, ``<sos/eos>`` last; ``--layout wenet`` writes WeNet's current layout
instead (``<blank> 0``, ``<unk> 1``, ``<sos/eos> 2``, then the units sorted), e.g. for a
dictionary WeNet's own tools will also read.  asrkit reads both.

Usage:
    tools/make_units.py data/train/text data/dict/units.txt
    tools/make_units.py --layout wenet data/train/text data/dict/lang_char.txt
    tools/make_units.py --bpe 500 --bpe-model data/dict/bpe.model data/train/text data/dict/units.txt
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asrkit.io.files import WriteError, atomic_write_bytes  # noqa: E402
from asrkit.text.cjk import is_cjk, split_cjk  # noqa: E402
from asrkit.text.tokenizer import CharTokenizer, normalize_text  # noqa: E402
from asrkit.text.units import LAYOUTS, SPECIAL, units_from_symbols, write_units  # noqa: E402


def read_transcripts(path: Path) -> list[str]:
    """Transcripts of a Kaldi ``text`` file or a raw ``data.list`` (normalized, non-empty)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    txt = json.loads(line)["txt"]
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise SystemExit(f"error: {path}:{lineno}: not a data.list entry with 'txt': {e}")
            else:
                parts = line.split(maxsplit=1)
                txt = parts[1] if len(parts) > 1 else ""
            txt = normalize_text(txt)
            if txt:
                out.append(txt)
    return out


def char_units(transcripts: list[str], split_with_space: bool) -> set[str]:
    """Every symbol the char tokenizer produces for ``transcripts``."""
    tok = CharTokenizer(units_from_symbols([]), split_with_space=split_with_space)
    units: set[str] = set()
    for txt in transcripts:
        units.update(tok.text_to_symbols(txt))
    return units


def train_bpe(transcripts: list[str], vocab_size: int, model_type: str, model_path: Path) -> set[str]:
    """Train sentencepiece on the non-CJK runs, write its model to ``model_path`` (atomically;
    :class:`WriteError` on failure) and return its pieces plus the CJK characters."""
    import sentencepiece as spm

    runs, cjk = [], set()
    for txt in transcripts:
        for part in split_cjk(txt):
            if len(part) == 1 and is_cjk(part):
                cjk.add(part)
            elif part.strip():
                runs.append(part.strip())
    units = set(cjk)
    if runs:
        trained = io.BytesIO()  # the model proto; sentencepiece writes no file when given a writer
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(runs), model_writer=trained, vocab_size=vocab_size,
            model_type=model_type, character_coverage=1.0, hard_vocab_limit=False,
            bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2)
        model_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(model_path, trained.getvalue())
        sp = spm.SentencePieceProcessor(model_proto=trained.getvalue())
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                  if not (sp.is_unknown(i) or sp.is_control(i))]
        if len(pieces) + 1 < vocab_size:
            print(f"note: the text supports only {len(pieces) + 1} pieces (asked {vocab_size})",
                  file=sys.stderr)
        units.update(pieces)
    return units


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("text", type=Path, help="Kaldi text file or raw data.list")
    p.add_argument("units", type=Path, help="units.txt to write")
    p.add_argument("--bpe", type=int, default=0, metavar="N", help="train a sentencepiece model of N pieces")
    p.add_argument("--bpe-type", choices=["bpe", "unigram"], default="bpe")
    p.add_argument("--bpe-model", type=Path, default=None, help="where to write the sentencepiece model "
                   "(default: bpe.model next to units.txt)")
    p.add_argument("--split-with-space", action="store_true",
                   help="char units: whitespace-separated fields are the units")
    p.add_argument("--layout", choices=LAYOUTS, default="asrkit",
                   help="asrkit: <sos/eos> last (default); wenet: <sos/eos> at id 2, after <blank> and <unk>")
    args = p.parse_args(argv)

    transcripts = read_transcripts(args.text)
    if not transcripts:
        print(f"error: no transcripts in {args.text}", file=sys.stderr)
        return 1
    if args.bpe and args.split_with_space:
        print("error: --split-with-space applies to char units only", file=sys.stderr)
        return 1
    try:
        if args.bpe:
            model = args.bpe_model or args.units.with_name("bpe.model")
            units = train_bpe(transcripts, args.bpe, args.bpe_type, model)
        else:
            units = char_units(transcripts, args.split_with_space)
        clash = units & set(SPECIAL)
        if clash:
            print(f"note: transcripts contain reserved symbol(s) {sorted(clash)}; kept at their fixed ids",
                  file=sys.stderr)
        table = write_units(args.units, units, args.layout)
    except (WriteError, OSError) as e:  # OSError: the output directory cannot be made
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(table)} units to {args.units} ({args.layout} layout)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
