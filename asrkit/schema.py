"""Helpers for writing config schema sections (used by every package's ``schema.py``).

A schema section is a dataclass whose fields are the implemented keys, with defaults.
Known WeNet keys that asrkit does not implement go in the class attribute
``UNSUPPORTED: ClassVar[dict[str, tuple]]``, mapping the key to the values that mean
"off" (or WeNet's default); only those values are accepted.  See ``asrkit.config``.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Iterable, Optional


def positive(value) -> Optional[str]:
    return None if value > 0 else f"must be > 0, got {value!r}"


def non_negative(value) -> Optional[str]:
    return None if value >= 0 else f"must be >= 0, got {value!r}"


def between(lo: float, hi: float) -> Callable[[Any], Optional[str]]:
    def _check(value) -> Optional[str]:
        return None if lo <= value <= hi else f"must be in [{lo}, {hi}], got {value!r}"
    return _check


def one_of(names: Callable[[], Iterable[str]]) -> Callable[[Any], Optional[str]]:
    """A check that the value is one of ``names()`` -- looked up when the config is checked,
    so a registry filled at import time (``asrkit.models.registry``) is the one list of names."""
    def _check(value) -> Optional[str]:
        allowed = sorted(names())
        if value in allowed:
            return None
        hint = difflib.get_close_matches(str(value), allowed, n=1)
        return f"must be one of {allowed}, got {value!r}" + (f"; did you mean {hint[0]}?" if hint else "")
    return _check


def checked(default: Any = dataclasses.MISSING, check: Callable | None = None,
            default_factory: Any = dataclasses.MISSING):
    """A dataclass field whose value is checked at load: ``checked(1, positive)``."""
    meta = {"check": check} if check is not None else {}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def merged_unsupported(*classes) -> dict[str, tuple]:
    """Union of the ``UNSUPPORTED`` maps of several section classes."""
    out: dict[str, tuple] = {}
    for cls in classes:
        out.update(getattr(cls, "UNSUPPORTED", {}))
    return out
