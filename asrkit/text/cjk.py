"""Script helpers: which characters are CJK (written without spaces between words)."""
from __future__ import annotations

import re

# Han (incl. extensions A-F and compatibility), kana, Hangul, CJK punctuation and
# full-width forms.  These scripts put no spaces between words, so a space next to one
# of them is segmentation, not a word boundary.
_CJK_RANGES = (
    "\u2e80-\u2fdf"    # radicals
    "\u3000-\u303f"    # CJK symbols and punctuation
    "\u3040-\u30ff"    # hiragana, katakana
    "\u3100-\u312f"    # bopomofo
    "\u3130-\u318f"    # Hangul compatibility jamo
    "\u31f0-\u31ff"    # katakana extensions
    "\u3400-\u4dbf"    # Han extension A
    "\u4e00-\u9fff"    # Han unified
    "\uac00-\ud7af"    # Hangul syllables
    "\uf900-\ufaff"    # Han compatibility
    "\uff00-\uffef"    # half/full-width forms
    "\U00020000-\U0003134f"  # Han extensions B-G
)
CJK_CHAR = re.compile(f"[{_CJK_RANGES}]")
_CJK_RUN_OR_OTHER = re.compile(f"([{_CJK_RANGES}])")


def is_cjk(ch: str) -> bool:
    """True when the single character ``ch`` belongs to a CJK script."""
    return CJK_CHAR.fullmatch(ch) is not None


def split_cjk(text: str) -> list[str]:
    """Split ``text`` into single CJK characters and the non-CJK runs between them
    (runs keep their spaces; empty runs are dropped)."""
    return [part for part in _CJK_RUN_OR_OTHER.split(text) if part]
