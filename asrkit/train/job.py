"""``TrainJob``: what one training run is asked to do, built once from the command line
(``asrkit.bin.train``) or by any other caller, and read by :func:`asrkit.train.run`.

Everything in it is a plain, frozen value: paths, how to resume, how to start the weights,
the warm start, threads, the device and the legacy launch flags.  A phase of the run that
needs another job (the warm start) makes one with :func:`dataclasses.replace`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import torch

from asrkit.data.mixing import ListMix


@dataclasses.dataclass(frozen=True)
class ModuleInit:
    """Start the parameters whose names begin with one of ``prefixes`` (comma-separated, as
    ``--enc_init_mods`` writes them) from ``checkpoint``; the rest is freshly initialised."""

    checkpoint: str
    prefixes: str = "encoder."

    def prefix_list(self) -> list[str]:
        return self.prefixes.split(",")


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """The curriculum's first phase: ``steps`` optimizer steps on ``data`` (with the config
    ``overrides`` applied after the job's own), whose modules ``prefixes`` then start the main run."""

    data: str
    steps: int
    overrides: tuple[str, ...] = ()
    prefixes: str = "encoder.,decoder.,ctc."


@dataclasses.dataclass(frozen=True)
class LaunchFlags:
    """The legacy launch (one process per GPU started by a shell loop): each value, when set,
    takes precedence over the config's ``launch`` section; torchrun's environment takes
    precedence over both (``asrkit.train.dist.resolve_launch``)."""

    rank: Optional[int] = None
    world_size: Optional[int] = None
    local_rank: Optional[int] = None
    init_method: Optional[str] = None
    dist_backend: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class TrainJob:
    """One training run.

    ``config`` is the YAML path and ``overrides`` its ``KEY.PATH=VALUE`` overrides, applied in
    order.  ``train_data``: one data list or several, each ``PATH`` or ``PATH:WEIGHT``
    (:attr:`train_mix`, ``asrkit.data.mixing``); ``cv_data``: one list or several, each
    reported apart.  ``checkpoint``: None starts fresh, ``"auto"`` resumes from the newest valid
    checkpoint in ``model_dir`` (fresh when there is none), a path resumes from that file.
    ``max_steps`` stops after that many optimizer steps in total (with a checkpoint).
    ``num_threads`` 0 means this node's cores divided by its processes.  ``init`` starts
    modules from another checkpoint (ignored by a run that resumes its own); ``warm_start``
    runs the curriculum's first phase when the run starts fresh.  ``device`` is ``"cuda"``
    or ``"cpu"``.  ``index_cache_dir`` is where the index of a WeNet shard list is cached
    when its own folder cannot be written (default: ``model_dir``)."""

    config: str
    train_data: str | tuple[str, ...]
    cv_data: str | tuple[str, ...]
    model_dir: Path
    overrides: tuple[str, ...] = ()
    checkpoint: Optional[str] = None
    max_steps: Optional[int] = None
    num_threads: int = 0
    tensorboard_dir: Optional[str] = None
    init: Optional[ModuleInit] = None
    warm_start: Optional[WarmStart] = None
    launch: LaunchFlags = LaunchFlags()
    device: str = dataclasses.field(default_factory=lambda: default_device())
    index_cache_dir: Optional[Path] = None

    @property
    def train_mix(self) -> ListMix:
        """The training lists and their weights (``ListSpecError`` for a malformed item)."""
        return ListMix.parse(self.train_data)

    @property
    def cv_lists(self) -> tuple[str, ...]:
        return (self.cv_data,) if isinstance(self.cv_data, str) else tuple(self.cv_data)

    @property
    def cache_dir(self) -> Path:
        return self.index_cache_dir or self.model_dir

    def resumes_explicitly(self) -> bool:
        """``checkpoint`` names a file (not None, not ``"auto"``)."""
        return self.checkpoint not in (None, "auto")


def default_device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"
