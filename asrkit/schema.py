"""Config schemas: the helpers every package's ``schema.py`` writes its sections with, and
the generic validator that checks a plain mapping against a schema (:func:`build`) and
raises :class:`ConfigError` -- what every config-reading module needs, without the root
config (:mod:`asrkit.config`) and the training schema it merges.

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
import types
import typing
from typing import Any, Callable, Iterable, Literal, Optional, Union

import yaml


class ConfigError(ValueError):
    """A config failed validation; ``errors`` lists one message per problem."""

    def __init__(self, errors: list[str], source: str = "config"):
        self.errors = list(errors)
        if len(self.errors) == 1:  # one problem: one line
            super().__init__(f"invalid {source}: {self.errors[0]}")
        else:
            lines = "\n  ".join(self.errors)
            super().__init__(f"invalid {source} ({len(self.errors)} problem(s)):\n  {lines}")



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


# ----------------------------------------------------------------------------- validation


def _closest(name: str, candidates: Iterable[str]) -> Optional[str]:
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, path: str, errors: list[str], notes: Optional[list[str]] = None) -> Any:
    """Return ``value`` converted to ``tp``; append messages to ``errors`` on failure (and the
    notes of the WeNet keys of nested sections to ``notes``)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path, errors, notes)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _convert(value, inner[0], path, errors, notes)
        for cand in inner:  # first alternative that accepts the value
            trial: list[str] = []
            out = _convert(value, cand, path, trial)
            if not trial:
                return out
        errors.append(f"{path}: expected {_type_name(tp)}, got {value!r}")
        return value
    if origin is Literal:
        if value in args and type(value) is type(next(a for a in args if a == value)):
            return value
        hint = _closest(str(value), [str(a) for a in args])
        extra = f"; did you mean {hint}?" if hint else ""
        errors.append(f"{path}: must be one of {list(args)}, got {value!r}{extra}")
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            errors.append(f"{path}: expected a list, got {value!r}")
            return value
        return [_convert(v, args[0], f"{path}[{i}]", errors, notes) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {value!r}")
            return value
        return {str(k): _convert(v, args[1], f"{path}.{k}", errors, notes) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - schema author error
        raise TypeError(f"unsupported schema type {tp!r} at {path}")
    errors.append(f"{path}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
    return value


def _build(cls, raw: Any, path: str, errors: list[str], notes: Optional[list[str]] = None):
    prefix = f"{path}." if path else ""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        errors.append(f"{path or 'config'}: expected a mapping, got {raw!r}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    wenet: dict[str, WenetKey] = getattr(cls, "WENET_KEYS", {})
    kwargs = {}

    def field_value(key: str, value: Any, full: str, errs: list[str] = errors, own_notes=notes) -> Any:
        """``value`` converted to field ``key``'s type and checked (problems to ``errs``)."""
        before = len(errs)
        converted = _convert(value, hints[key], full, errs, own_notes)
        checker = fields[key].metadata.get("check")
        if checker is not None and len(errs) == before:
            msg = checker(converted)
            if msg:
                errs.append(f"{full}: {msg}")
        return converted

    for key, value in raw.items():
        key = str(key)
        full = prefix + key
        if key in fields:
            kwargs[key] = field_value(key, value, full)
        elif key in wenet:
            _wenet_key(wenet[key], key, value, raw, prefix, kwargs, field_value, errors, notes)
        else:
            hint = _closest(key, list(fields) + list(wenet))
            extra = f"; did you mean {prefix}{hint}?" if hint else ""
            errors.append(f"{full}: unknown key{extra}")
    try:
        obj = cls(**{k: v for k, v in kwargs.items()})
    except TypeError as e:  # pragma: no cover - defensive
        errors.append(f"{path or 'config'}: {e}")
        return cls()
    post = getattr(obj, "validate", None)
    if post is not None:
        for msg in post() or []:
            errors.append(f"{prefix}{msg}")
    return obj


def _wenet_key(entry: WenetKey, key: str, value: Any, raw: dict, prefix: str, kwargs: dict,
               field_value, errors: list[str], notes: Optional[list[str]]) -> None:
    """Accept (with a note) or refuse the WeNet key ``key`` of section ``raw`` (see
    :class:`asrkit.schema.WenetKey`); a ``same_as`` key fills its field's value."""
    full = prefix + key
    before = len(errors)
    if entry.kind in ("only", "off"):
        if not entry.accepts(value):
            errors.append(entry.refusal(full, value))
            return
    elif entry.kind == "any":
        value = _convert(value, entry.of_type, full, errors)
    elif entry.kind == "same_as":
        value = field_value(entry.field, value, full)
        if len(errors) == before and entry.field in raw:
            own: list[str] = []  # (the field's own problems are reported where it is read)
            other = field_value(entry.field, raw[entry.field], prefix + entry.field, own, None)
            if not own and other != value:
                errors.append(f"{full}: {value!r} but {prefix}{entry.field} is {other!r}; "
                              f"they must be equal ({entry.reason})")
        elif len(errors) == before:
            kwargs[entry.field] = value
    else:  # pragma: no cover - schema author error
        raise TypeError(f"unknown WenetKey kind {entry.kind!r} at {full}")
    if len(errors) == before and entry.check is not None:
        msg = entry.check(value, raw)
        if msg:
            errors.append(f"{full}: {msg}")
    if len(errors) == before and notes is not None:
        notes.append(entry.note(full, value))


def build(cls, raw: dict, source: str = "config", notes: Optional[list[str]] = None):
    """Validate ``raw`` (a plain dict) against schema ``cls``; raise :class:`ConfigError`
    listing every problem.  The notes of the accepted WeNet keys
    (:meth:`asrkit.schema.WenetKey.note`) are appended to ``notes``."""
    errors: list[str] = []
    obj = _build(cls, raw, "", errors, notes)
    if errors:
        raise ConfigError(errors, source)
    return obj


def check_all(cls, raw: dict) -> list[str]:
    """Every validation problem of ``raw`` against ``cls`` (empty list when it is valid)."""
    errors: list[str] = []
    _build(cls, raw, "", errors, None)
    return errors
