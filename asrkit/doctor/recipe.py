"""The job of the recipe the doctor runs in: its training config and data lists, read from
the recipe's ``run.sh`` (and the ``tools/recipe_defaults.sh`` it sources) without running
either.

A recipe (``examples/*/s0/run.sh``) sources ``tools/recipe_defaults.sh``, then assigns its own
values, then sources ``tools/parse_options.sh``; stage 4 passes ``--config "$train_config"``
and ``--train_data data/<train>/<list> --cv_data data/<cv>/<list>`` (``tools/recipe_stages.sh``
``stage_train``: ``<train>``/``<cv>`` are ``train``/``dev`` unless the call sets ``train=``/``cv=``;
``<list>`` is ``data.shards.list`` when ``data_type`` is ``shard``, else ``data.list``).  So a
variable's value is its last plain assignment at the start of a line -- in the defaults,
then in ``run.sh`` before ``parse_options.sh`` -- that holds no ``$`` expansion; assignments
inside ``if`` blocks (indented) or after the options depend on the command line and are not
read.  Without ``run.sh`` in the directory, or when a value cannot be read that way,
:class:`RecipeError` says which option to pass.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Optional

DEFAULTS = Path("tools") / "recipe_defaults.sh"
# NAME=VALUE at the start of a line or after "; " (VALUE: quoted, or up to a space, ';' or '#')
_ASSIGNMENT = re.compile(r"(?:^|;\s*)([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|[^\s;#]*)")


class RecipeError(ValueError):
    """The recipe's job cannot be read from the directory (the message says what to pass)."""


@dataclasses.dataclass(frozen=True)
class RecipeJob:
    """What the recipe's stage 4 passes: ``config``, ``train_data``, ``cv_data`` (paths
    relative to the recipe directory)."""

    config: str
    train_data: str
    cv_data: str


def assignments(text: str) -> dict[str, str]:
    """The last value of each variable assigned at the start of a line of shell ``text``
    (unindented: not inside an ``if`` or a function), before the line that sources
    ``parse_options.sh``; quotes removed.  Values holding ``$`` map to ``None``."""
    values: dict[str, Optional[str]] = {}
    for line in text.splitlines():
        if "parse_options.sh" in line and not line.lstrip().startswith("#"):
            break
        if not line or line[0].isspace() or line.startswith("#"):
            continue
        for name, value in _ASSIGNMENT.findall(line.split(" #", 1)[0]):
            value = value[1:-1] if value[:1] in "\"'" and len(value) >= 2 else value
            values[name] = None if "$" in value else value
    return values


def _stage_train_args(text: str) -> dict[str, str]:
    """``train=``/``cv=`` given to ``stage_train`` in ``run.sh`` (continuation lines joined)."""
    joined = text.replace("\\\n", " ")
    call = re.search(r"stage_train\b([^\n]*)", joined)
    return dict(re.findall(r"\s(train|cv)=(\S+)", call.group(1))) if call else {}


def recipe_job(directory: Path = Path(".")) -> RecipeJob:
    """The job of the recipe in ``directory`` (see the module doc); :class:`RecipeError`
    (the reason, to follow "not given and") when it has no ``run.sh`` or a value cannot be
    read without running it."""
    run_sh = directory / "run.sh"
    if not run_sh.is_file():
        raise RecipeError(f"there is no run.sh in {directory.resolve()} to read the recipe's values from (run the "
                          f"doctor in the recipe directory)")
    text = run_sh.read_text(encoding="utf-8", errors="replace")
    defaults = directory / DEFAULTS
    values = assignments(defaults.read_text(encoding="utf-8", errors="replace")) if defaults.is_file() else {}
    values.update(assignments(text))
    config, data_type = values.get("train_config"), values.get("data_type") or "raw"
    if not config:
        raise RecipeError(f"{run_sh} sets no plain train_config=... before its options")
    sets = {"train": "train", "cv": "dev", **_stage_train_args(text)}
    if any("$" in v for v in sets.values()):
        raise RecipeError(f"the data sets {run_sh} passes to stage_train depend on variables")
    listing = "data.shards.list" if data_type == "shard" else "data.list"
    return RecipeJob(config, f"data/{sets['train']}/{listing}", f"data/{sets['cv']}/{listing}")


def complete_job(config: Optional[str], train_data: Optional[str], cv_data: Optional[str],
                 directory: Path = Path(".")) -> tuple[RecipeJob, list[str]]:
    """The job with the paths given, the missing ones (None) read from the recipe in
    ``directory``; also the options that were read from it (``[]`` when all were given, and
    then the recipe is not read).  :class:`RecipeError` names the missing options and an
    example to pass when the recipe cannot give them."""
    missing = [flag for flag, value in (("--config", config), ("--train_data", train_data), ("--cv_data", cv_data))
               if not value]
    if not missing:
        return RecipeJob(config, train_data, cv_data), []
    try:
        recipe = recipe_job(directory)
    except RecipeError as e:
        example = {"--config": "conf/X.yaml (the recipe's train_config)", "--train_data": "data/train/data.list",
                   "--cv_data": "data/dev/data.list"}
        raise RecipeError(f"{', '.join(missing)} not given and {e}: pass "
                          + " ".join(f"{flag} {example[flag]}" for flag in missing)) from None
    return RecipeJob(config or recipe.config, train_data or recipe.train_data, cv_data or recipe.cv_data), missing
