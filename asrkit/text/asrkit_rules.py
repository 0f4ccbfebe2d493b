"""asrkit's tokenization rules (``tokenizer_conf.rules: asrkit``), selected only by that key.

* :class:`CharTokenizer` -- one unit per character.  CJK-aware: a space is a word
  boundary only between two non-CJK characters, where it becomes the unit ``▁``; a
  space touching a CJK character is word segmentation and is dropped.  With
  ``split_with_space`` the transcript is instead split at whitespace and every
  whitespace-separated field is one unit (pre-tokenized text: phones, words).
* :class:`BpeTokenizer` -- sentencepiece pieces for the non-CJK runs of a transcript
  (case kept), one unit per CJK character (:mod:`asrkit.text.cjk`'s wide ranges).

Both first NFC-normalize the text, collapse whitespace runs and strip the ends
(:func:`normalize_text`).
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Sequence

from asrkit.text.base import SentencePieceModel, Tokenizer
from asrkit.text.cjk import is_cjk, split_cjk
from asrkit.text.units import SPACE

_WHITESPACE = re.compile(r"\s+")


def normalize_text(txt: str) -> str:
    """NFC-normalize, collapse whitespace runs to one space and strip the ends."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", txt)).strip()


class CharTokenizer(Tokenizer):
    """Character units, asrkit's rules (see the module docstring for the space rules)."""

    def __init__(self, symbols: Sequence[str], split_with_space: bool = False):
        super().__init__(symbols)
        self.split_with_space = split_with_space

    def text_to_symbols(self, txt: str) -> list[str]:
        txt = normalize_text(txt)
        if self.split_with_space:
            return txt.split(" ") if txt else []
        out = []
        for i, ch in enumerate(txt):
            if ch != " ":
                out.append(ch)
            elif not is_cjk(txt[i - 1]) and not is_cjk(txt[i + 1]):
                out.append(SPACE)  # normalize_text strips the ends: both neighbours exist
        return out

    def symbols_to_text(self, symbols: Sequence[str]) -> str:
        if self.split_with_space:
            return " ".join(symbols)
        return "".join(symbols).replace(SPACE, " ").strip()


class BpeTokenizer(SentencePieceModel, Tokenizer):
    """Sentencepiece pieces for non-CJK runs, single units for CJK characters (asrkit's rules)."""

    def __init__(self, symbols: Sequence[str], bpe_model: str | Path):
        Tokenizer.__init__(self, symbols)
        self.load_bpe(bpe_model)

    def text_to_symbols(self, txt: str) -> list[str]:
        out: list[str] = []
        for part in split_cjk(normalize_text(txt)):
            if len(part) == 1 and is_cjk(part):
                out.append(part)
            elif part.strip():
                out.extend(self._sp.encode(part.strip(), out_type=str))
        return out

    def symbols_to_text(self, symbols: Sequence[str]) -> str:
        return "".join(symbols).replace(SPACE, " ").strip()
