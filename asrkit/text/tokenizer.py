"""Tokenizers: transcript text <-> unit ids, over a ``units.txt`` symbol table.

Two rule sets (``tokenizer_conf.rules``), each with a char and a BPE tokenizer sharing one
interface (:class:`Tokenizer`):

* ``wenet`` (the default): WeNet's own rules, in :mod:`asrkit.text.wenet`.
* ``asrkit``: the tokenizers of this module, selected only by ``rules: asrkit``:

  * :class:`CharTokenizer` -- one unit per character.  CJK-aware: a space is a word
    boundary only between two non-CJK characters, where it becomes the unit ``▁``; a
    space touching a CJK character is word segmentation and is dropped.  With
    ``split_with_space`` the transcript is instead split at whitespace and every
    whitespace-separated field is one unit (pre-tokenized text: phones, words).
  * :class:`BpeTokenizer` -- sentencepiece pieces for the non-CJK runs of a transcript
    (case kept), one unit per CJK character (:mod:`asrkit.text.cjk`'s wide ranges).

  Both first NFC-normalize the text, collapse whitespace runs and strip the ends.

Symbols missing from the table map to ``<unk>``; each occurrence adds one to
``unk_count`` of the tokenizer instance (per process: DataLoader workers hold copies).
"""
from __future__ import annotations

import abc
import re
import unicodedata
from pathlib import Path
from typing import Iterable, Sequence

from asrkit.text.cjk import is_cjk, split_cjk
from asrkit.text.units import BLANK, SOS_EOS, SPACE, UNK, UnitsError, read_units
from asrkit.text.vocabulary import Vocabulary

_WHITESPACE = re.compile(r"\s+")


def normalize_text(txt: str) -> str:
    """NFC-normalize, collapse whitespace runs to one space and strip the ends."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", txt)).strip()


class Tokenizer(abc.ABC):
    """Maps symbol sequences to ids over a symbol table (index = id).

    Subclasses define :meth:`text_to_symbols` and :meth:`symbols_to_text`.
    """

    def __init__(self, symbols: Sequence[str]):
        self.symbols: list[str] = list(symbols)
        self._ids = {sym: i for i, sym in enumerate(self.symbols)}
        # the special ids, from where the table puts the symbols (what models are built for)
        self.vocabulary = Vocabulary.from_symbols(self.symbols)
        self.unk_count = 0

    @property
    def blank_id(self) -> int:
        return self.vocabulary.blank_id

    @property
    def unk_id(self) -> int:
        return self.vocabulary.unk_id

    @property
    def sos_id(self) -> int:
        return self.vocabulary.sos_id

    @property
    def eos_id(self) -> int:
        return self.vocabulary.eos_id

    @property
    def vocab_size(self) -> int:
        """Number of ids, ``<blank>`` and ``<sos/eos>`` included."""
        return len(self.symbols)

    @abc.abstractmethod
    def text_to_symbols(self, txt: str) -> list[str]:
        """The unit symbols of transcript ``txt`` (before the table lookup)."""

    @abc.abstractmethod
    def symbols_to_text(self, symbols: Sequence[str]) -> str:
        """The text a sequence of unit symbols spells."""

    def encode(self, txt: str) -> list[int]:
        """Ids of the symbols of ``txt``; unknown symbols become ``<unk>`` and are counted."""
        ids = []
        for sym in self.text_to_symbols(txt):
            idx = self._ids.get(sym)
            if idx is None or sym in (SOS_EOS, BLANK):
                self.unk_count += 1
                idx = self.unk_id
            ids.append(idx)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; ``<blank>`` and ``<sos/eos>`` are dropped, ``<unk>`` is kept
        as the literal ``<unk>``.  Raises IndexError on an id outside the table."""
        syms = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.symbols):
                raise IndexError(f"token id {i} outside the symbol table (size {len(self.symbols)})")
            if i in (self.blank_id, self.sos_id, self.eos_id):
                continue
            syms.append(self.symbols[i])
        return self.symbols_to_text(syms)


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


class BpeModelError(ValueError):
    """The sentencepiece model of ``tokenizer: bpe`` is missing or unreadable (one line naming it)."""


def load_sentencepiece(path: str | Path):
    """The ``SentencePieceProcessor`` of the model file ``path``; :class:`BpeModelError`
    when it is missing, unreadable or not a sentencepiece model."""
    import sentencepiece

    path = Path(path)
    if not path.is_file():
        raise BpeModelError(f"sentencepiece model not found: {path}")
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as e:  # (sentencepiece raises RuntimeError for a malformed file)
        raise BpeModelError(f"{path}: not a readable sentencepiece model ({str(e).strip()})") from None


class SentencePieceModel:
    """Mixin: the sentencepiece processor ``_sp`` of the model file ``bpe_model``, loaded
    by :meth:`load_bpe` and again after unpickling (the SWIG processor does not pickle;
    DataLoader workers get pickled copies)."""

    def load_bpe(self, bpe_model: str | Path) -> None:
        self._sp = load_sentencepiece(bpe_model)
        self.bpe_model = str(bpe_model)

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_sp"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._sp = load_sentencepiece(self.bpe_model)


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


# what a ``special_tokens`` key names -> the unit symbol that must sit at the declared id
DECLARABLE = {"<blank>": BLANK, "<unk>": UNK, "<sos>": SOS_EOS, "<eos>": SOS_EOS}


def check_special_tokens(declared: dict[str, int] | None, symbols: Sequence[str], source: str) -> None:
    """Raise :class:`UnitsError` (one line naming the declaration and ``source``'s symbol)
    when a ``special_tokens`` declaration (``<blank>``, ``<unk>``, ``<sos>``, ``<eos>`` ->
    id) disagrees with the symbol table ``symbols``: the unit at each declared id must be
    the declared one (``<sos>`` and ``<eos>`` are both the ``<sos/eos>`` unit, one id, as
    in WeNet's configs).  A declaration that passes says what the table says, so the
    :class:`Vocabulary` of the table honours it."""
    if not declared:
        return
    unknown = sorted(set(declared) - set(DECLARABLE))
    if unknown:
        raise UnitsError(f"tokenizer_conf.special_tokens: unknown token(s) {unknown}; "
                         f"expected some of {sorted(DECLARABLE)}")
    for tok in (t for t in DECLARABLE if t in declared):  # (a fixed order: the first problem is reported)
        idx, want = declared[tok], DECLARABLE[tok]
        actual = symbols.index(want) if want in symbols else None
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(symbols):
            raise UnitsError(f"tokenizer_conf.special_tokens {tok}: {idx!r} is not an id of {source} "
                             f"(0..{len(symbols) - 1}; {want} is id {actual})")
        if symbols[idx] != want:
            raise UnitsError(f"tokenizer_conf.special_tokens says {tok} is id {idx}, but {source} has "
                             f"{symbols[idx]!r} at id {idx} ({want} is id {actual}): fix or remove the "
                             f"declaration")


def build_tokenizer(cfg) -> Tokenizer:
    """The tokenizer a config describes.

    ``cfg`` is anything with ``.tokenizer`` (``"char"`` | ``"bpe"``) and
    ``.tokenizer_conf`` (:class:`asrkit.text.schema.TokenizerConf`): the root
    ``TrainConfig`` or a ``TextSections``.  ``rules: wenet`` builds
    :class:`asrkit.text.wenet.WenetCharTokenizer` / ``WenetBpeTokenizer`` (with the symbols of
    ``non_lang_syms_path`` when set), ``rules: asrkit`` :class:`CharTokenizer` /
    :class:`BpeTokenizer`.  Paths are used as given (relative to the working directory,
    the recipe directory).  A ``special_tokens`` declaration is checked against the units
    (:func:`check_special_tokens`).  Problems with the files raise :class:`UnitsError`,
    :class:`BpeModelError` or :class:`asrkit.text.wenet.NonLangSymsError`; config loading
    has already refused key combinations that do not apply
    (:meth:`asrkit.text.schema.TextSections.validate`).
    """
    from asrkit.text import wenet

    conf = cfg.tokenizer_conf
    if not conf.symbol_table_path:
        raise ValueError("tokenizer_conf.symbol_table_path is not set (the units.txt of tools/make_units.py)")
    symbols = read_units(conf.symbol_table_path)
    check_special_tokens(conf.special_tokens, symbols, conf.symbol_table_path)
    if cfg.tokenizer not in ("char", "bpe"):
        raise ValueError(f"unknown tokenizer {cfg.tokenizer!r} (expected 'char' or 'bpe')")
    if conf.rules == "asrkit":
        if cfg.tokenizer == "char":
            return CharTokenizer(symbols, split_with_space=conf.split_with_space)
        return BpeTokenizer(symbols, conf.bpe_path)
    syms_path = conf.non_lang_syms_path
    non_lang_syms = None if syms_path is None else wenet.read_non_lang_syms(syms_path)
    if cfg.tokenizer == "char":
        return wenet.WenetCharTokenizer(symbols, non_lang_syms, split_with_space=conf.split_with_space,
                                        connect_symbol=conf.connect_symbol)
    return wenet.WenetBpeTokenizer(symbols, conf.bpe_path, non_lang_syms)


__all__ = ["Tokenizer", "CharTokenizer", "BpeTokenizer", "BpeModelError", "SentencePieceModel",
           "build_tokenizer", "normalize_text"]
