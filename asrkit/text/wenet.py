"""WeNet's tokenization rules (``tokenizer_conf.rules: wenet``, the default).

Text -> unit symbols exactly as WeNet's ``CharTokenizer`` and ``BpeTokenizer`` do
(wenet/text/char_tokenizer.py, bpe_tokenizer.py, tokenize_utils.py; the symbols file as
wenet/utils/file_utils.py reads it):

1. The transcript is stripped of surrounding whitespace (``str.strip``); nothing else is
   normalized (no NFC, inner whitespace runs kept).
2. With a non-linguistic symbols file (``non_lang_syms_path`` set, even to an empty file)
   the whole transcript is upper-cased, then split at every span matching
   :data:`NON_LANG_SYM` (``[...]``, ``<...>`` or ``{...}`` without nested brackets of its
   kind); parts that are empty or all whitespace are dropped.  The char tokenizer strips
   each part, the BPE tokenizer does not.  A part equal to a listed symbol (compared
   as listed: a symbol with lower-case letters never matches the upper-cased text) is one
   unit; a bracketed span not listed is tokenized like the text around it.  Without the
   file the whole transcript is one part and its case is kept.
3. Char: with ``split_with_space`` a part's fields split at each single space
   (``str.split(" ")``: two spaces in a row give an empty field) are the units; otherwise
   each character is a unit and a space becomes ``▁``.
4. BPE: the part is upper-cased and split around every character in U+4E00..U+9FFF (CJK
   Unified Ideographs only, :data:`WENET_CJK`); each such character is a unit, each other
   run that is not all whitespace is encoded by the sentencepiece model as it is (its
   surrounding spaces included).  ``split_with_space`` plays no part (config loading
   refuses it with BPE).
5. Symbols not in the units file become ``<unk>`` (:meth:`asrkit.text.base.Tokenizer.encode`;
   asrkit also maps the literal symbols ``<blank>`` and ``<sos/eos>`` to ``<unk>``, which
   WeNet would look up).

Decoding (:meth:`asrkit.text.base.Tokenizer.decode`) joins the units -- with
``connect_symbol`` for char units (WeNet's key; asrkit's default is a space with
``split_with_space``, WeNet's is nothing), with nothing for pieces -- then shows ``▁`` as a
space and strips the ends; WeNet's char ``tokens2text`` leaves ``▁`` in place.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from asrkit.text.base import SentencePieceModel, Tokenizer
from asrkit.text.units import SPACE

NON_LANG_SYM = re.compile(r"(\[[^\[\]]+\]|<[^<>]+>|{[^{}]+})")
WENET_CJK = re.compile(r"([\u4e00-\u9fff])")


class NonLangSymsError(ValueError):
    """The non-linguistic symbols file is missing, unreadable or holds a line that is not
    one bracketed symbol (one line naming the file)."""


def read_non_lang_syms(path: str | Path) -> list[str]:
    """The symbols of a non-linguistic symbols file: one per line, each line stripped, in
    file order.  Every line must be one ``[x]``, ``<x>`` or ``{x}`` (:data:`NON_LANG_SYM`,
    whole line), as WeNet's ``read_non_lang_symbols`` requires (it refuses an empty line
    too); otherwise :class:`NonLangSymsError` naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise NonLangSymsError(f"non-linguistic symbols file not found: {path}")
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise NonLangSymsError(f"{path}: cannot read the non-linguistic symbols file ({e})") from None
    if lines and lines[-1] == "":
        lines.pop()  # (the newline ending the last line)
    syms = []
    for lineno, line in enumerate(lines, 1):
        sym = line.strip()
        if NON_LANG_SYM.fullmatch(sym) is None:
            raise NonLangSymsError(f"{path}:{lineno}: {sym!r} is not a non-linguistic symbol "
                                   f"(one {{x}}, <x> or [x] per line)")
        syms.append(sym)
    return syms


def wenet_parts(txt: str, non_lang_syms: Optional[Sequence[str]]) -> list[str]:
    """Steps 1-2 of the module docstring: the parts of ``txt`` (unstripped) -- the stripped
    transcript itself when ``non_lang_syms`` is None."""
    line = txt.strip()
    if non_lang_syms is None:
        return [line]
    return [part for part in NON_LANG_SYM.split(line.upper()) if part.strip()]


class WenetCharTokenizer(Tokenizer):
    """WeNet's ``CharTokenizer`` (module docstring, steps 1-3 and 5)."""

    def __init__(self, symbols: Sequence[str], non_lang_syms: Optional[Sequence[str]] = None,
                 split_with_space: bool = False, connect_symbol: Optional[str] = None):
        super().__init__(symbols)
        self.non_lang_syms = None if non_lang_syms is None else list(non_lang_syms)
        self.split_with_space = split_with_space
        self.connect_symbol = (" " if split_with_space else "") if connect_symbol is None else connect_symbol

    def text_to_symbols(self, txt: str) -> list[str]:
        out: list[str] = []
        for part in wenet_parts(txt, self.non_lang_syms):
            if self.non_lang_syms is not None:
                part = part.strip()
                if part in self.non_lang_syms:
                    out.append(part)
                    continue
            if self.split_with_space:
                out.extend(part.split(" "))
            else:
                out.extend(SPACE if ch == " " else ch for ch in part)
        return out

    def symbols_to_text(self, symbols: Sequence[str]) -> str:
        return self.connect_symbol.join(symbols).replace(SPACE, " ").strip()


class WenetBpeTokenizer(SentencePieceModel, Tokenizer):
    """WeNet's ``BpeTokenizer`` (module docstring, steps 1-2 and 4-5)."""

    def __init__(self, symbols: Sequence[str], bpe_model: str | Path,
                 non_lang_syms: Optional[Sequence[str]] = None):
        Tokenizer.__init__(self, symbols)
        self.load_bpe(bpe_model)
        self.non_lang_syms = None if non_lang_syms is None else list(non_lang_syms)

    def text_to_symbols(self, txt: str) -> list[str]:
        out: list[str] = []
        for part in wenet_parts(txt, self.non_lang_syms):
            if self.non_lang_syms is not None and part in self.non_lang_syms:
                out.append(part)
                continue
            for run in WENET_CJK.split(part.upper()):
                if WENET_CJK.fullmatch(run):
                    out.append(run)
                elif run.strip():
                    out.extend(self._sp.encode(run, out_type=str))
        return out

    def symbols_to_text(self, symbols: Sequence[str]) -> str:
        return "".join(symbols).replace(SPACE, " ").strip()


__all__ = ["NON_LANG_SYM", "WENET_CJK", "NonLangSymsError", "read_non_lang_syms", "wenet_parts",
           "WenetCharTokenizer", "WenetBpeTokenizer"]
