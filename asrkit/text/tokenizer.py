"""Tokenizers: transcript text <-> unit ids, over a ``units.txt`` symbol table, built from
a config by :func:`build_tokenizer`.

``tokenizer: whisper``: Whisper's tiktoken BPE and special tokens (:mod:`asrkit.text.whisper`).
Otherwise two rule sets (``tokenizer_conf.rules``), each with a char and a BPE tokenizer sharing one
interface (:class:`asrkit.text.base.Tokenizer`):

* ``wenet`` (the default): WeNet's own rules, in :mod:`asrkit.text.wenet`.
* ``asrkit``: asrkit's CJK-aware rules, in :mod:`asrkit.text.asrkit_rules`.

This module stands above both rule sets (it chooses between them).  The interface and
asrkit's tokenizers are named here too; the package ``asrkit.text`` names every tokenizer.
"""
from __future__ import annotations

from typing import Sequence

from asrkit.text.asrkit_rules import BpeTokenizer, CharTokenizer, normalize_text
from asrkit.text.base import BpeModelError, SentencePieceModel, Tokenizer
from asrkit.text.units import BLANK, SOS_EOS, UNK, UnitsError, read_units
from asrkit.text.wenet import WenetBpeTokenizer, WenetCharTokenizer, read_non_lang_syms
from asrkit.text.whisper import WhisperTokenizer


# what a ``special_tokens`` key names -> the unit symbol that must sit at the declared id
DECLARABLE = {"<blank>": BLANK, "<unk>": UNK, "<sos>": SOS_EOS, "<eos>": SOS_EOS}


def check_special_tokens(declared: dict[str, int] | None, symbols: Sequence[str], source: str) -> None:
    """Raise :class:`UnitsError` (one line naming the declaration and ``source``'s symbol)
    when a ``special_tokens`` declaration (``<blank>``, ``<unk>``, ``<sos>``, ``<eos>`` ->
    id) disagrees with the symbol table ``symbols``: the unit at each declared id must be
    the declared one (``<sos>`` and ``<eos>`` are both the ``<sos/eos>`` unit, one id, as
    in WeNet's configs).  A declaration that passes says what the table says, so the
    :class:`asrkit.text.vocabulary.Vocabulary` of the table honours it."""
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

    ``cfg`` is anything with ``.tokenizer`` (``"char"`` | ``"bpe"`` | ``"whisper"``) and
    ``.tokenizer_conf`` (:class:`asrkit.text.schema.TokenizerConf`): the root
    ``TrainConfig`` or a ``TextSections``.  ``rules: wenet`` builds
    :class:`asrkit.text.wenet.WenetCharTokenizer` / ``WenetBpeTokenizer`` (with the symbols of
    ``non_lang_syms_path`` when set), ``rules: asrkit`` :class:`CharTokenizer` /
    :class:`BpeTokenizer`; ``tokenizer: whisper`` :class:`asrkit.text.whisper.WhisperTokenizer`
    of ``is_multilingual`` and ``num_languages`` (no units file).  Paths are used as given (relative to the working directory,
    the recipe directory).  A ``special_tokens`` declaration is checked against the units
    (:func:`check_special_tokens`).  Problems with the files raise :class:`UnitsError`,
    :class:`BpeModelError` or :class:`asrkit.text.wenet.NonLangSymsError`; config loading
    has already refused key combinations that do not apply
    (:meth:`asrkit.text.schema.TextSections.validate`).
    """
    conf = cfg.tokenizer_conf
    if cfg.tokenizer == "whisper":
        return WhisperTokenizer(conf.is_multilingual, conf.num_languages)
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
    non_lang_syms = None if syms_path is None else read_non_lang_syms(syms_path)
    if cfg.tokenizer == "char":
        return WenetCharTokenizer(symbols, non_lang_syms, split_with_space=conf.split_with_space,
                                  connect_symbol=conf.connect_symbol)
    return WenetBpeTokenizer(symbols, conf.bpe_path, non_lang_syms)


__all__ = ["Tokenizer", "CharTokenizer", "BpeTokenizer", "BpeModelError", "SentencePieceModel",
           "build_tokenizer", "check_special_tokens", "normalize_text"]
