"""Top-level config keys owned by ``asrkit.text`` (merged into ``asrkit.config.TrainConfig``)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, Optional

from asrkit.schema import WenetKey, off, only


@dataclasses.dataclass
class TokenizerConf:
    """``tokenizer_conf`` (WeNet key names, plus ``rules``).

    ``symbol_table_path``: the ``units.txt`` of ``tools/make_units.py`` (either layout).
    ``bpe_path``: the sentencepiece model (``tokenizer: bpe`` only).
    ``rules``: how text becomes unit symbols.  ``wenet`` (the default): exactly as WeNet's
    ``CharTokenizer`` / ``BpeTokenizer`` (``asrkit.text.wenet``), so a WeNet config
    tokenizes as in WeNet -- among others ``tokenizer: bpe`` upper-cases the text, and the
    char tokenizer turns every space into ``▁``.  ``asrkit``: asrkit's own rules
    (``asrkit.text.tokenizer``: NFC, whitespace runs collapsed, a space touching a CJK
    character dropped, case kept); a config must say so to get them.
    ``non_lang_syms_path``: WeNet's non-linguistic symbols file (one ``{x}``, ``<x>`` or
    ``[x]`` per line; ``rules: wenet`` only).  When set, the transcript is upper-cased and
    split at every bracketed span; a span listed in the file is one unit.
    ``split_with_space``: char tokenizer only; each space-separated field of a
    transcript is one unit instead of each character.
    ``connect_symbol``: char tokenizer with ``rules: wenet`` only; what decoding puts
    between units (default: a space with ``split_with_space``, else nothing).
    ``special_tokens``: optional declaration of the special ids (keys ``<blank>``,
    ``<unk>``, ``<sos>``, ``<eos>``, as in WeNet's configs; ``<sos>`` and ``<eos>`` are the
    one ``<sos/eos>`` unit).  The ids always come from where the units file puts the
    symbols; a declaration is checked against the file when the tokenizer is built and a
    declared id holding another symbol is refused (``check_special_tokens``).
    """

    symbol_table_path: str = ""
    bpe_path: Optional[str] = None
    rules: Literal["wenet", "asrkit"] = "wenet"
    non_lang_syms_path: Optional[str] = None
    split_with_space: bool = False
    connect_symbol: Optional[str] = None
    special_tokens: Optional[dict[str, int]] = None

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "is_multilingual": off(False, feature="Whisper's multilingual tokenizer"),
        "num_languages": only(1, reason="read only by WeNet's Whisper tokenizer; asrkit's tokenizers have "
                                        "no language tokens"),
    }


@dataclasses.dataclass
class TextSections:
    """Top-level keys of this package: ``tokenizer`` and ``tokenizer_conf``."""

    tokenizer: Literal["char", "bpe"] = "char"
    tokenizer_conf: TokenizerConf = dataclasses.field(default_factory=TokenizerConf)

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {}

    def validate(self) -> list[str]:
        conf, errors = self.tokenizer_conf, []
        if self.tokenizer == "bpe" and not conf.bpe_path:
            errors.append("tokenizer: bpe needs tokenizer_conf.bpe_path (the sentencepiece model)")
        if self.tokenizer == "bpe" and conf.split_with_space:
            errors.append("tokenizer_conf.split_with_space applies to the char tokenizer only")
        if conf.connect_symbol is not None and (self.tokenizer != "char" or conf.rules != "wenet"):
            errors.append("tokenizer_conf.connect_symbol applies to the char tokenizer with rules: wenet only")
        if conf.non_lang_syms_path is not None and conf.rules != "wenet":
            errors.append("tokenizer_conf.non_lang_syms_path follows WeNet's rules (the text is upper-cased): "
                          "it needs tokenizer_conf.rules: wenet")
        return errors
