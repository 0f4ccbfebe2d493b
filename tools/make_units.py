#!/usr/bin/env python3
"""Build the modelling units (``units.txt``) from training transcripts.

Input: a Kaldi ``text`` file (``<key> <transcript>`` per line) or a raw ``data.list``
(JSON lines; the ``txt`` field is used) -- detected per line by a leading ``{``.

The units are the symbols the tokenizer of ``tokenizer_conf.rules`` produces for the
transcripts (``--rules``, the same choice; default ``wenet``, as the config's):

* ``wenet`` (asrkit/text/wenet.py): char units are WeNet's char tokens (every space is
  ``▁``; with ``--non-lang-syms FILE`` the text is upper-cased and the listed symbols are
  units; with ``--split-with-space`` every space-separated field is a unit).  ``--bpe N``
  trains sentencepiece on the upper-cased runs between CJK characters (U+4E00..U+9FFF) and
  non-linguistic symbols -- the text WeNet's BPE tokenizer hands the model -- and lists its
  pieces plus those CJK characters (and the listed symbols).  Symbols holding whitespace
  (a tab, the empty field of two spaces) cannot be units: they stay ``<unk>``.
* ``asrkit`` (asrkit/text/tokenizer.py): transcripts NFC-normalized with whitespace runs
  collapsed; char units CJK-aware (a space touching a CJK character is dropped, ``▁``
  between non-CJK words); ``--bpe N`` trains on the non-CJK runs as written (case kept)
  and lists the pieces plus every CJK character (asrkit/text/cjk.py's wide ranges).

A corpus too small for N pieces gets fewer, with a note (sentencepiece's soft vocabulary
limit).

Output follows the units contract in asrkit's layout: ``<blank> 0``, ``<unk> 1``, the
units sorted, ``<sos/eos>`` last; ``--layout wenet`` writes WeNet's current layout
instead (``<blank> 0``, ``<unk> 1``, ``<sos/eos> 2``, then the units sorted), e.g. for a
dictionary WeNet's own tools will also read.  asrkit reads both.

Usage:
    tools/make_units.py data/train/text data/dict/units.txt
    tools/make_units.py --layout wenet data/train/text data/dict/lang_char.txt
    tools/make_units.py --bpe 500 --bpe-model data/dict/bpe.model data/train/text data/dict/units.txt
    tools/make_units.py --rules asrkit --bpe 60 data/train/text data/dict/units.txt
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from asrkit.files import WriteError, atomic_write_bytes
from asrkit.text.cjk import is_cjk, split_cjk
from asrkit.text.tokenizer import CharTokenizer, normalize_text
from asrkit.text.units import LAYOUTS, SPECIAL, units_from_symbols, write_units
from asrkit.text.wenet import (WENET_CJK, NonLangSymsError, WenetCharTokenizer, read_non_lang_syms,
                               wenet_parts)


def read_transcripts(path: Path) -> list[str]:
    """Transcripts of a Kaldi ``text`` file or a raw ``data.list`` (stripped, non-empty)."""
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
            txt = txt.strip()
            if txt:
                out.append(txt)
    return out


def char_units(transcripts: list[str], rules: str, split_with_space: bool, non_lang_syms) -> set[str]:
    """Every symbol the char tokenizer of ``rules`` produces for ``transcripts``."""
    empty = units_from_symbols([])
    if rules == "asrkit":
        tok = CharTokenizer(empty, split_with_space=split_with_space)
    else:
        tok = WenetCharTokenizer(empty, non_lang_syms, split_with_space=split_with_space)
    units: set[str] = set(non_lang_syms or ())
    for txt in transcripts:
        units.update(tok.text_to_symbols(txt))
    return units


def bpe_text(transcripts: list[str], rules: str, non_lang_syms) -> tuple[list[str], set[str]]:
    """``(runs, units)``: the text runs the BPE tokenizer of ``rules`` hands sentencepiece
    (stripped) and the units it makes without it (CJK characters, listed symbols)."""
    runs: list[str] = []
    listed = set(non_lang_syms or ())
    units = set(listed)
    for txt in transcripts:
        if rules == "asrkit":
            pieces = split_cjk(normalize_text(txt))
            cjk = [p for p in pieces if len(p) == 1 and is_cjk(p)]
        else:
            pieces = [run for part in wenet_parts(txt, non_lang_syms) if part not in listed
                      for run in WENET_CJK.split(part.upper())]
            cjk = [p for p in pieces if WENET_CJK.fullmatch(p)]
        units.update(cjk)
        runs.extend(p.strip() for p in pieces if p.strip() and p not in cjk)
    return runs, units


def train_bpe(runs: list[str], vocab_size: int, model_type: str, model_path: Path) -> set[str]:
    """Train sentencepiece on ``runs``, write its model to ``model_path`` (atomically;
    :class:`WriteError` on failure) and return its pieces (none without runs)."""
    import sentencepiece as spm

    if not runs:
        return set()
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
        print(f"note: the text supports only {len(pieces) + 1} pieces (asked {vocab_size})", file=sys.stderr)
    return set(pieces)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("text", type=Path, help="Kaldi text file or raw data.list")
    p.add_argument("units", type=Path, help="units.txt to write")
    p.add_argument("--rules", choices=["wenet", "asrkit"], default="wenet",
                   help="the tokenizer_conf.rules the units are for (default: wenet)")
    p.add_argument("--non-lang-syms", type=Path, default=None, metavar="FILE",
                   help="rules wenet: the tokenizer_conf.non_lang_syms_path file")
    p.add_argument("--bpe", type=int, default=0, metavar="N", help="train a sentencepiece model of N pieces")
    p.add_argument("--bpe-type", choices=["bpe", "unigram"], default="bpe")
    p.add_argument("--bpe-model", type=Path, default=None, help="where to write the sentencepiece model "
                   "(default: bpe.model next to units.txt)")
    p.add_argument("--split-with-space", action="store_true",
                   help="char units: space-separated fields are the units")
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
    if args.non_lang_syms and args.rules != "wenet":
        print("error: --non-lang-syms follows WeNet's rules: it needs --rules wenet", file=sys.stderr)
        return 1
    try:
        non_lang_syms = read_non_lang_syms(args.non_lang_syms) if args.non_lang_syms else None
        if args.bpe:
            model = args.bpe_model or args.units.with_name("bpe.model")
            runs, units = bpe_text(transcripts, args.rules, non_lang_syms)
            units |= train_bpe(runs, args.bpe, args.bpe_type, model)
        else:
            units = char_units(transcripts, args.rules, args.split_with_space, non_lang_syms)
        spaced = {u for u in units if not u or any(ch.isspace() for ch in u)}
        if spaced:
            print(f"note: {sorted(spaced)} hold whitespace and cannot be units: they stay <unk>", file=sys.stderr)
        units -= spaced
        clash = units & set(SPECIAL)
        if clash:
            print(f"note: transcripts contain reserved symbol(s) {sorted(clash)}; kept at their fixed ids",
                  file=sys.stderr)
        table = write_units(args.units, units, args.layout)
    except NonLangSymsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (WriteError, OSError) as e:  # OSError: the output directory cannot be made
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(table)} units to {args.units} ({args.rules} rules, {args.layout} layout)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
