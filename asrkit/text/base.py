"""The tokenizer interface every rule set implements, and the sentencepiece model the BPE
tokenizers of both rule sets load.

:class:`Tokenizer` maps transcript text to unit ids over a ``units.txt`` symbol table and
back; a rule set (``asrkit.text.asrkit_rules``, ``asrkit.text.wenet``) says only how text
becomes unit symbols and symbols become text.  Symbols missing from the table map to
``<unk>``; each occurrence adds one to ``unk_count`` of the tokenizer instance (per
process: DataLoader workers hold copies).
"""
from __future__ import annotations

import abc
from pathlib import Path
from typing import Iterable, Sequence

from asrkit.text.units import BLANK, SOS_EOS
from asrkit.text.vocabulary import Vocabulary


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


class BpeModelError(ValueError):
    """The sentencepiece model of ``tokenizer: bpe`` is missing or unreadable (one line naming it)."""


def load_sentencepiece(path: str | Path):
    """The ``SentencePieceProcessor`` of the model file ``path``; :class:`BpeModelError`
    when it is missing, unreadable or not a sentencepiece model."""
    import sentencepiece  # (loaded only when a BPE tokenizer is built)

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
