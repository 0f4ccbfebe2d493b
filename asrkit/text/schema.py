"""Top-level config keys owned by ``asrkit.text`` (merged into ``asrkit.config.TrainConfig``)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, Optional

from asrkit.schema import WenetKey, between, checked, optional
from asrkit.text.whisper import LANGUAGES, WHISPER_TOKENS


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
    ``is_multilingual``, ``num_languages`` (``tokenizer: whisper`` only, WeNet's keys and
    meanings): Whisper's ``multilingual.tiktoken`` (true) or ``gpt2.tiktoken`` (false), and
    how many language tokens follow ``<|startoftranscript|>`` (99 for every model but
    large-v3's 100; ``*.en`` models: false and 99), the ids as ``whisper.tokenizer``
    numbers them (:mod:`asrkit.text.whisper`).  Other tokenizers accept only WeNet's
    defaults, ``false`` and 1 (or no value).
    ``special_tokens``: optional declaration of the special ids (keys ``<blank>``,
    ``<unk>``, ``<sos>``, ``<eos>``, as in WeNet's configs; ``<sos>`` and ``<eos>`` are the
    one ``<sos/eos>`` unit).  The ids always come from where the units file puts the
    symbols; a declaration is checked against the file when the tokenizer is built and a
    declared id holding another symbol is refused (``check_special_tokens``).  With
    ``tokenizer: whisper`` its keys are those of :data:`asrkit.text.whisper.WHISPER_TOKENS`
    (WeNet's converter writes them all), the ids ``model: whisper``'s prompt and targets use,
    checked against the tokenizer's when the model is built
    (:func:`asrkit.models.whisper.special_tokens`).  ``null`` for a path: not given (WeNet's
    converter writes the paths a Whisper tokenizer does not read as null).
    """

    symbol_table_path: Optional[str] = ""
    bpe_path: Optional[str] = None
    rules: Literal["wenet", "asrkit"] = "wenet"
    non_lang_syms_path: Optional[str] = None
    split_with_space: bool = False
    connect_symbol: Optional[str] = None
    special_tokens: Optional[dict[str, int]] = None
    is_multilingual: bool = False
    num_languages: Optional[int] = checked(None, optional(between(1, len(LANGUAGES))))


def _whisper_tokens_problems(value: Optional[dict]) -> list[str]:
    """``tokenizer_conf.special_tokens`` of ``tokenizer: whisper``: keys of
    :data:`WHISPER_TOKENS`, integer ids."""
    unknown = sorted(set(value or {}) - set(WHISPER_TOKENS))
    if unknown:
        return [f"tokenizer_conf.special_tokens: unknown Whisper token(s) {unknown}; expected some of "
                f"{list(WHISPER_TOKENS)}"]
    bad = [k for k, v in (value or {}).items() if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    return [f"tokenizer_conf.special_tokens.{bad[0]} must be a token id (an integer >= 0)"] if bad else []


@dataclasses.dataclass
class TextSections:
    """Top-level keys of this package: ``tokenizer`` and ``tokenizer_conf``."""

    tokenizer: Literal["char", "bpe", "whisper"] = "char"
    tokenizer_conf: TokenizerConf = dataclasses.field(default_factory=TokenizerConf)

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {}

    @property
    def reads_units_file(self) -> bool:
        """Whether the tokenizer's symbols come from ``tokenizer_conf.symbol_table_path`` (char
        and bpe); Whisper's come with its tiktoken file."""
        return self.tokenizer != "whisper"

    def validate(self) -> list[str]:
        conf, errors = self.tokenizer_conf, []
        if self.tokenizer == "whisper":
            if conf.num_languages is None:
                errors.append("tokenizer: whisper needs tokenizer_conf.num_languages (99; large-v3: 100)")
            errors += _whisper_tokens_problems(conf.special_tokens)
            given = [key for key in ("symbol_table_path", "bpe_path", "non_lang_syms_path", "connect_symbol")
                     if getattr(conf, key)] + \
                (["split_with_space"] if conf.split_with_space else []) + (["rules"] if conf.rules != "wenet" else [])
            if given:
                errors.append(f"tokenizer: whisper reads Whisper's tiktoken file; tokenizer_conf.{given[0]} "
                              f"does not apply to it")
            return errors
        if conf.is_multilingual or conf.num_languages not in (None, 1):
            errors.append("tokenizer_conf.is_multilingual / num_languages apply to tokenizer: whisper only "
                          "(other tokenizers take WeNet's defaults false and 1)")
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
