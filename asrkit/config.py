"""Configuration: load YAML, apply ``--override`` edits, validate against typed schemas.

Every key of a config falls in exactly one of three classes:

* **implemented** -- a field of a schema dataclass; its value is type-checked at load.
* **WeNet key that is not a field** -- an entry of the schema's ``WENET_KEYS`` table
  (``asrkit.schema.WenetKey``): accepted at the values whose WeNet meaning asrkit has
  (asrkit's only behaviour, a WeNet feature switched off, a value WeNet itself takes no
  meaning from, or a second name of a field) and then dropped with a note that says
  which, in the table's words; any other value is an error giving the same reason.
* **unknown** -- an error naming the full key path and the closest valid key.

All errors of one config are collected and raised together as one :class:`ConfigError`,
at load time, before any heavy work starts.

Schemas are plain dataclasses.  Supported field types: ``bool``, ``int``, ``float``
(ints and float-looking strings such as ``1e-3`` are accepted, a YAML 1.1 gotcha),
``str``, ``Literal[...]``, ``Optional[T]``, ``list[T]``, ``dict[str, T]`` and nested
schema dataclasses.  A field made with ``asrkit.schema.checked(default, fn)`` is
also checked by ``fn(value)``, which returns an error message or ``None``.  A schema may
define ``validate(self) -> list[str]`` for checks across its fields.
"""
from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path
from typing import Any, ClassVar, Iterable, Optional

import yaml

from asrkit.config_versions import upgrade
from asrkit.data.schema import DataSections
from asrkit.finetune.schema import FinetuneSections
from asrkit.files import atomic_write_text
from asrkit.models.registry import name_problems
from asrkit.models.schema import ModelSections
from asrkit.schema import ConfigError, WenetKey, build, merged_wenet_keys
from asrkit.text.schema import TextSections
from asrkit.train.schema import TrainerSections


# ----------------------------------------------------------------------------- schemas
# Sections live next to the code that reads them (asrkit/train/schema.py, asrkit/data/schema.py,
# asrkit/models/schema.py, asrkit/text/schema.py) and are merged into the root below.


_SECTIONS = (TrainerSections, FinetuneSections, ModelSections, DataSections, TextSections)


@dataclasses.dataclass
class TrainConfig(*reversed(_SECTIONS)):
    """Root of a training config: the union of every package's top-level keys.
    Each package declares its keys (and its table of the WeNet keys that are not fields) in
    its own ``schema.py``; they are merged here."""

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = merged_wenet_keys(*_SECTIONS)

    def validate(self) -> list[str]:
        """The checks across fields of every section that has them, then the names of the
        model parts against the registries that build them
        (:func:`asrkit.models.registry.name_problems`)."""
        errors = [msg for section in _SECTIONS if "validate" in vars(section) for msg in section.validate(self)]
        return errors + name_problems({"encoder": self.encoder, "decoder": self.decoder, "model": self.model,
                                       "predictor": self.predictor, "joint": self.joint})


# ----------------------------------------------------------------------------- overrides


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b.c=value"`` -> (["a", "b", "c"], value parsed as a YAML scalar/flow value)."""
    if "=" not in item:
        raise ConfigError([f"--override {item!r}: expected KEY.PATH=VALUE"], "command line")
    key, text = item.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ConfigError([f"--override {item!r}: empty key component"], "command line")
    try:
        value = yaml.safe_load(text) if text.strip() != "" else ""
    except yaml.YAMLError as e:
        raise ConfigError([f"--override {item!r}: value is not valid YAML ({e})"], "command line")
    return parts, value


def apply_overrides(raw: dict, overrides: Iterable[str]) -> dict:
    """Return a copy of ``raw`` with each ``a.b.c=value`` applied (intermediate mappings
    are created when missing; validation later catches keys that do not exist)."""
    out = copy.deepcopy(raw) if raw else {}
    for item in overrides or []:
        parts, value = parse_override(item)
        node = out
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif not isinstance(nxt, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError([f"--override {item!r}: {where} is {nxt!r}, not a mapping"], "command line")
            node = nxt
        node[parts[-1]] = value
    return out


# ----------------------------------------------------------------------------- io


def yaml_error_line(e: yaml.YAMLError) -> str:
    """A YAML parse error in one line: where (1-based line and column) and what."""
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    return where + (f"{what} ({context})" if context else what)


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"config file not found: {path}"], str(path))
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError([f"not a text file (not UTF-8 at byte {e.start})"], str(path))
    except yaml.YAMLError as e:
        raise ConfigError([f"not valid YAML: {yaml_error_line(e)}"], str(path))
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError([f"top level must be a mapping, got {type(raw).__name__}"], str(path))
    return raw


def load_config(path: str | Path, overrides: Iterable[str] = (), cls=None,
                notes: Optional[list[str]] = None):
    """Read ``path``, apply ``overrides``, validate against ``cls`` (default :class:`TrainConfig`).
    A training config is first read in the meaning of its ``config_version``
    (:func:`asrkit.config_versions.upgrade`; overrides are in the current meaning)."""
    raw = read_yaml(path)
    if cls is None:
        cls = TrainConfig
        raw = upgrade(raw, notes)
    overrides = list(overrides or [])
    try:
        return build(cls, apply_overrides(raw, overrides), str(path), notes)
    except ConfigError as e:
        blamed = [_blame_override(message, overrides) for message in e.errors]
        if blamed == e.errors:
            raise
        raise ConfigError(blamed, f"{path} with its overrides") from None


def _blame_override(message: str, overrides: list[str]) -> str:
    """``message`` (``"a.b: ..."``) led by the last ``--override`` that set ``a.b``, a key
    under it or a mapping above it: the user's mistake is on the command line, not in the
    file."""
    key = message.split(":", 1)[0].strip()
    for item in reversed(overrides):
        target = item.split("=", 1)[0].strip()
        if key == target or key.startswith(target + ".") or target.startswith(key + "."):
            return f"--override {item}: {message}"
    return message


def to_dict(obj) -> dict:
    """Plain dict of a schema object (what ``train.yaml`` holds)."""
    return dataclasses.asdict(obj)


def dump_config(obj, path: str | Path) -> None:
    """Write ``obj`` as YAML, atomically (:class:`asrkit.files.WriteError` on failure, the
    old file kept); ``load_config(path)`` gives back an equal object."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(to_dict(obj), sort_keys=False, allow_unicode=True))


def schema_classes(cls=None) -> list[type]:
    """All schema dataclasses reachable from ``cls`` (default the root), root first."""
    cls = cls or TrainConfig
    seen: list[type] = []

    def walk(tp):
        if dataclasses.is_dataclass(tp):
            if tp in seen:
                return
            seen.append(tp)
            for hint in typing.get_type_hints(tp).values():
                if typing.get_origin(hint) is not ClassVar:  # (WENET_KEYS is a table, not a section)
                    walk(hint)
        for arg in typing.get_args(tp):
            walk(arg)

    walk(cls)
    return seen
