"""Helpers for writing config schema sections (used by every package's ``schema.py``).

A schema section is a dataclass whose fields are the implemented keys, with defaults.
WeNet keys that are not fields go in the class attribute
``WENET_KEYS: ClassVar[dict[str, WenetKey]]``: one entry per key saying which values
asrkit accepts and why (:func:`only`, :func:`off`, :func:`any_value`, :func:`same_as`).
The loader (``asrkit.config``) notes an accepted value with that reason and refuses any
other value with it, so the words a user reads come from this one table.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Iterable, Optional

import yaml


def positive(value) -> Optional[str]:
    return None if value > 0 else f"must be > 0, got {value!r}"


def non_negative(value) -> Optional[str]:
    return None if value >= 0 else f"must be >= 0, got {value!r}"


def between(lo: float, hi: float) -> Callable[[Any], Optional[str]]:
    def _check(value) -> Optional[str]:
        return None if lo <= value <= hi else f"must be in [{lo}, {hi}], got {value!r}"
    return _check


def optional(check: Callable[[Any], Optional[str]]) -> Callable[[Any], Optional[str]]:
    """``check`` for a key whose ``None`` means "not given" (``None`` passes)."""
    return lambda value: None if value is None else check(value)


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


# In a table of the keys one kind of a part reads (a predictor, a scheduler): the key has no
# default, the kind requires it.
REQUIRED = object()


def kind_key_problems(section: str, what: str, kind: str, conf: Any, params: dict[str, Any]) -> list[str]:
    """The keys of ``conf`` -- a section whose fields are all optional (``None``: not given),
    read by ``what`` ``kind`` -- against that kind's key table ``params`` (key -> default, or
    :data:`REQUIRED`): one message per key given that the kind does not read, and per
    required key not given."""
    problems = []
    for f in dataclasses.fields(conf):
        value = getattr(conf, f.name)
        if value is not None and f.name not in params:
            problems.append(f"{section}.{f.name}: {what} {kind} takes no such key (its keys: {', '.join(params)})")
        elif value is None and params.get(f.name) is REQUIRED:
            problems.append(f"{section}.{f.name}: required by {what} {kind}")
    return problems


def merged_wenet_keys(*classes) -> dict[str, "WenetKey"]:
    """Union of the ``WENET_KEYS`` tables of several section classes."""
    out: dict[str, WenetKey] = {}
    for cls in classes:
        out.update(getattr(cls, "WENET_KEYS", {}))
    return out


# ----------------------------------------------------------------------------- WeNet keys


def yaml_value(value: Any) -> str:
    """``value`` as it would be written in a YAML config (``true``, ``null``, ``[1, 2]``)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _same_value(value: Any, accepted: Any) -> bool:
    """YAML-aware equality: booleans and ``None`` only equal themselves; a float accepts an
    int or a float-looking string of the same value (``1e-5`` is a string in YAML 1.1)."""
    if accepted is None or isinstance(accepted, bool) or isinstance(value, bool):
        return type(value) is type(accepted) and value == accepted
    if isinstance(accepted, float):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return False
        return isinstance(value, (int, float)) and float(value) == accepted
    return type(value) is type(accepted) and value == accepted


@dataclasses.dataclass(frozen=True)
class WenetKey:
    """A WeNet config key that is not a field of asrkit's schema.

    ``kind``:

    * ``"only"``: ``values`` are asrkit's only behaviour for the key (``ctc: ctc``); the
      note is ``<value> (<reason>)``; any other value is refused with the reason.
    * ``"off"``: ``values`` switch off a WeNet feature asrkit does not implement
      (``causal: false``); ``reason`` names the feature; any other value is refused.
    * ``"any"``: every value of type ``of_type`` is accepted: WeNet itself takes no
      meaning from it in a config, or records there what asrkit reads elsewhere
      (``model_dir``); the note is ``<value> (<reason>)``.
    * ``"same_as"``: WeNet's second name of the field ``field`` (``vocab_size`` =
      ``output_dim``): the two must be equal; when the field is absent it takes this value.

    ``check(value, section) -> message or None`` checks the value against the raw mapping
    of the section it sits in (e.g. ``use_amp`` against ``dtype``).
    """

    kind: str
    reason: str
    values: tuple = ()
    of_type: Any = None
    field: str = ""
    check: Optional[Callable[[Any, dict], Optional[str]]] = None

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is one of ``values`` (kinds ``only`` and ``off``)."""
        return any(_same_value(value, a) for a in self.values)

    def note(self, path: str, value: Any) -> str:
        """The log line for an accepted value."""
        if self.kind == "off":
            return f"{path}: {yaml_value(value)} (off; asrkit does not implement {self.reason})"
        return f"{path}: {yaml_value(value)} ({self.reason})"

    def refusal(self, path: str, value: Any) -> str:
        """The error for a value outside ``values`` (kinds ``only`` and ``off``)."""
        shown = ", ".join(yaml_value(a) for a in self.values)
        why = f"asrkit does not implement {self.reason}" if self.kind == "off" else self.reason
        return f"{path}: {yaml_value(value)} is not supported by asrkit (accepted only as: {shown}; {why})"


def only(*values: Any, reason: str,
         check: Optional[Callable[[Any, dict], Optional[str]]] = None) -> WenetKey:
    """A key accepted at ``values``: asrkit's only behaviour, described by ``reason``."""
    return WenetKey("only", reason, values, check=check)


def off(*values: Any, feature: str) -> WenetKey:
    """A key accepted at the ``values`` that switch off ``feature`` (which asrkit lacks)."""
    return WenetKey("off", feature, values)


def any_value(of_type: Any, reason: str,
              check: Optional[Callable[[Any, dict], Optional[str]]] = None) -> WenetKey:
    """A key accepted at any value of ``of_type`` (and passing ``check``)."""
    return WenetKey("any", reason, of_type=of_type, check=check)


def same_as(field: str, reason: str) -> WenetKey:
    """WeNet's second name of the schema field ``field``."""
    return WenetKey("same_as", reason, field=field)
