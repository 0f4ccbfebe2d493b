"""Top-level config keys owned by ``asrkit.text`` (merged into ``asrkit.config.TrainConfig``)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, Optional

from asrkit.schema import WenetKey, off, only


@dataclasses.dataclass
class TokenizerConf:
    """``tokenizer_conf`` (WeNet key names).

    ``symbol_table_path``: the ``units.txt`` of ``tools/make_units.py``.
    ``bpe_path``: the sentencepiece model (``tokenizer: bpe`` only).
    ``split_with_space``: char tokenizer only; each whitespace-separated field of a
    transcript is one unit instead of each character.
    ``special_tokens``: optional declaration of the special ids (keys ``<blank>``,
    ``<unk>``, ``<sos>``, ``<eos>``, as in WeNet's configs; ``<sos>`` and ``<eos>`` are the
    one ``<sos/eos>`` unit).  The ids always come from where the units file puts the
    symbols; a declaration is checked against the file when the tokenizer is built and a
    declared id holding another symbol is refused (``check_special_tokens``).
    """

    symbol_table_path: str = ""
    bpe_path: Optional[str] = None
    split_with_space: bool = False
    special_tokens: Optional[dict[str, int]] = None

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "non_lang_syms_path": off(None, feature="non-linguistic symbols ([noise], <unk>-style tags kept whole)"),
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
        errors = []
        if self.tokenizer == "bpe" and not self.tokenizer_conf.bpe_path:
            errors.append("tokenizer: bpe needs tokenizer_conf.bpe_path (the sentencepiece model)")
        if self.tokenizer == "bpe" and self.tokenizer_conf.split_with_space:
            errors.append("tokenizer_conf.split_with_space applies to the char tokenizer only")
        return errors
