"""Symbol tables (``units.txt``): one ``<symbol> <id>`` per line, ids 0..N-1 in order.

A table names its special units by symbol, wherever they sit: ``<blank>`` (CTC blank),
``<unk>`` and ``<sos/eos>`` (start and end of a decoder sequence), each exactly once.  Two
layouts are written and read: asrkit's (``<blank> 0``, ``<unk> 1``, the modelling units
sorted by code point, ``<sos/eos>`` last) and WeNet's current one (``<blank> 0``,
``<unk> 1``, ``<sos/eos> 2``, then the units); :class:`asrkit.text.Vocabulary` takes the
special ids from where the symbols are.  The space of English char units is written as
``▁`` (U+2581), the sentencepiece word-boundary mark, so every symbol is a single
whitespace-free field.
"""
from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Iterable

from asrkit.files import atomic_write_text

BLANK = "<blank>"
UNK = "<unk>"
SOS_EOS = "<sos/eos>"
SPACE = "\u2581"
SPECIAL = (BLANK, UNK, SOS_EOS)
LAYOUTS = ("asrkit", "wenet")


class UnitsError(ValueError):
    """A units file (or what a config declares about it) breaks the contract; the one-line
    message names the file."""


def units_from_symbols(symbols: Iterable[str], layout: str = "asrkit") -> list[str]:
    """The full id-ordered table for a set of modelling units (duplicates and specials
    removed, the rest sorted): ``<blank>``, ``<unk>``, the units, ``<sos/eos>`` (layout
    ``asrkit``) or ``<blank>``, ``<unk>``, ``<sos/eos>``, the units (layout ``wenet``)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown units layout {layout!r} (expected one of {LAYOUTS})")
    body = sorted(set(symbols) - set(SPECIAL))
    for sym in body:
        if not sym or any(ch.isspace() for ch in sym):
            raise UnitsError(f"unit {sym!r} is empty or contains whitespace")
    return [BLANK, UNK, *body, SOS_EOS] if layout == "asrkit" else [BLANK, UNK, SOS_EOS, *body]


def write_units(path: str | Path, symbols: Iterable[str], layout: str = "asrkit") -> list[str]:
    """Write ``units_from_symbols(symbols, layout)`` to ``path`` (``<symbol> <id>`` lines,
    atomically: :class:`asrkit.files.WriteError` on failure, the old file kept) and
    return the table written."""
    table = units_from_symbols(symbols, layout)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(f"{sym} {i}\n" for i, sym in enumerate(table)))
    return table


def read_units(path: str | Path) -> list[str]:
    """Read a units file and return its symbols indexed by id (NFC-normalized).

    Raises :class:`UnitsError` (one line naming the file, and the line where there is
    one) unless the file exists and is UTF-8, every line is ``<symbol> <id>``, ids are
    exactly 0..N-1 in order, symbols are unique and ``<blank>``, ``<unk>`` and
    ``<sos/eos>`` are among them (at any ids).
    """
    path = Path(path)
    if not path.is_file():
        raise UnitsError(f"units file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UnitsError(f"{path}: cannot read the units file ({e})") from None
    table: list[str] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise UnitsError(f"{path}:{lineno}: expected '<symbol> <id>', got {line!r}")
        sym, idx = unicodedata.normalize("NFC", fields[0]), int(fields[1])
        if idx != len(table):
            raise UnitsError(f"{path}:{lineno}: id {idx} out of order: ids must be 0..N-1 in order "
                             f"(expected {len(table)})")
        if sym in seen:
            raise UnitsError(f"{path}:{lineno}: duplicate symbol {sym!r} (already id {table.index(sym)})")
        seen.add(sym)
        table.append(sym)
    missing = [s for s in SPECIAL if s not in seen]
    if missing:
        raise UnitsError(f"{path}: no {' '.join(missing)} unit (a units file needs {BLANK}, {UNK} and "
                         f"{SOS_EOS}, at any ids)")
    return table
