"""Symbol tables (``units.txt``): one ``<symbol> <id>`` per line.

The contract shared by every part of asrkit: ``<blank>`` has id 0, ``<unk>`` id 1,
the modelling units follow sorted by code point, and ``<sos/eos>`` takes the last id.
The space of English char units is written as ``▁`` (U+2581), the sentencepiece
word-boundary mark, so every symbol is a single whitespace-free field.
"""
from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Iterable

from asrkit.io.files import atomic_write_text

BLANK = "<blank>"
UNK = "<unk>"
SOS_EOS = "<sos/eos>"
SPACE = "\u2581"
SPECIAL = (BLANK, UNK, SOS_EOS)


class UnitsError(ValueError):
    """A units file breaks the contract; the message names the file and line."""


def units_from_symbols(symbols: Iterable[str]) -> list[str]:
    """The full id-ordered table for a set of modelling units: ``<blank>``, ``<unk>``,
    the units sorted (duplicates and specials removed), ``<sos/eos>``."""
    body = sorted(set(symbols) - set(SPECIAL))
    for sym in body:
        if not sym or any(ch.isspace() for ch in sym):
            raise UnitsError(f"unit {sym!r} is empty or contains whitespace")
    return [BLANK, UNK, *body, SOS_EOS]


def write_units(path: str | Path, symbols: Iterable[str]) -> list[str]:
    """Write ``units_from_symbols(symbols)`` to ``path`` (``<symbol> <id>`` lines,
    atomically: :class:`asrkit.io.files.WriteError` on failure, the old file kept) and
    return the table written."""
    table = units_from_symbols(symbols)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(f"{sym} {i}\n" for i, sym in enumerate(table)))
    return table


def read_units(path: str | Path) -> list[str]:
    """Read a units file and return its symbols indexed by id.

    Raises :class:`UnitsError` unless ids are exactly 0..N-1 in order, symbols are unique,
    ``<blank>`` is 0, ``<unk>`` is 1 and ``<sos/eos>`` is the last id.
    """
    path = Path(path)
    if not path.is_file():
        raise UnitsError(f"units file not found: {path}")
    table: list[str] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise UnitsError(f"{path}:{lineno}: expected '<symbol> <id>', got {line!r}")
        sym, idx = fields[0], int(fields[1])
        if idx != len(table):
            raise UnitsError(f"{path}:{lineno}: id {idx} out of order (expected {len(table)})")
        if sym in seen:
            raise UnitsError(f"{path}:{lineno}: duplicate symbol {sym!r}")
        seen.add(sym)
        table.append(unicodedata.normalize("NFC", sym))
    if len(table) < 3 or table[0] != BLANK or table[1] != UNK or table[-1] != SOS_EOS:
        raise UnitsError(f"{path}: must start with '{BLANK} 0', '{UNK} 1' and end with "
                         f"'{SOS_EOS} <last id>'")
    return table
