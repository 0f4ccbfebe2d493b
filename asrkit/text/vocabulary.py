"""The vocabulary a model is built for: its size and where the special units sit.

Models, searches and exporters take the special ids from a :class:`Vocabulary` rather
than assuming a layout, so a units file may place ``<sos/eos>`` wherever the dictionary
says (asrkit's layout puts it last; WeNet's current recipes put it at id 2).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from asrkit.text.units import BLANK, SOS_EOS, UNK


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """Unit symbols indexed by id, and the ids of ``<blank>``, ``<unk>``, ``<sos>``, ``<eos>``.

    ``sos_id == eos_id`` in every layout asrkit reads (one ``<sos/eos>`` unit), as in WeNet.
    """

    symbols: tuple[str, ...]
    blank_id: int
    unk_id: int
    sos_id: int
    eos_id: int

    @property
    def size(self) -> int:
        """Number of ids, the special units included (the output dimension of a model)."""
        return len(self.symbols)

    @classmethod
    def from_symbols(cls, symbols: Sequence[str]) -> "Vocabulary":
        """The vocabulary of a units table (index = id); each special unit must occur once."""
        symbols = tuple(symbols)
        ids = {}
        for name in (BLANK, UNK, SOS_EOS):
            found = [i for i, s in enumerate(symbols) if s == name]
            if len(found) != 1:
                raise ValueError(f"a vocabulary needs exactly one {name} unit, found {len(found)}")
            ids[name] = found[0]
        return cls(symbols, blank_id=ids[BLANK], unk_id=ids[UNK], sos_id=ids[SOS_EOS], eos_id=ids[SOS_EOS])

    @classmethod
    def of_size(cls, size: int) -> "Vocabulary":
        """asrkit's layout for ``size`` ids with placeholder unit names (``<blank>`` 0,
        ``<unk>`` 1, ``<sos/eos>`` last): for tests and tools that have no units file."""
        if size < 3:
            raise ValueError(f"a vocabulary needs at least 3 ids (<blank>, <unk>, <sos/eos>), got {size}")
        return cls.from_symbols([BLANK, UNK, *(f"u{i}" for i in range(2, size - 1)), SOS_EOS])
