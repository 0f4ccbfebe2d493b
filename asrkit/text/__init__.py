"""Text: symbol tables and tokenizers (WeNet's rules by default, asrkit's CJK-aware ones on request)."""
from asrkit.text.tokenizer import BpeModelError, BpeTokenizer, CharTokenizer, Tokenizer, build_tokenizer, normalize_text
from asrkit.text.vocabulary import Vocabulary
from asrkit.text.units import BLANK, SOS_EOS, SPACE, UNK, UnitsError, read_units, units_from_symbols, write_units
from asrkit.text.wenet import NonLangSymsError, WenetBpeTokenizer, WenetCharTokenizer, read_non_lang_syms

__all__ = ["Tokenizer", "Vocabulary", "CharTokenizer", "BpeTokenizer", "WenetCharTokenizer", "WenetBpeTokenizer",
           "build_tokenizer", "normalize_text", "read_non_lang_syms",
           "read_units", "write_units", "units_from_symbols", "UnitsError", "BpeModelError", "NonLangSymsError",
           "BLANK", "UNK", "SOS_EOS", "SPACE"]
