"""Text: symbol tables and tokenizers (char, CJK-aware; sentencepiece BPE)."""
from asrkit.text.tokenizer import BpeModelError, BpeTokenizer, CharTokenizer, Tokenizer, build_tokenizer, normalize_text
from asrkit.text.vocabulary import Vocabulary
from asrkit.text.units import BLANK, SOS_EOS, SPACE, UNK, UnitsError, read_units, units_from_symbols, write_units

__all__ = ["Tokenizer", "Vocabulary", "CharTokenizer", "BpeTokenizer", "build_tokenizer", "normalize_text",
           "read_units", "write_units", "units_from_symbols", "UnitsError", "BpeModelError",
           "BLANK", "UNK", "SOS_EOS", "SPACE"]
