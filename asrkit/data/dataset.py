"""The per-rank data loader: epoch plan (``asrkit.data.sampler``) + sample processing
(``asrkit.data.processors``) + ``torch.utils.data.DataLoader`` workers.

How a batch travels
    The training process owns the plan.  For each pass it turns the rank's planned
    batches into :class:`BatchTask` items ``(epoch, position, utterance indices)`` and
    feeds them to a DataLoader over :class:`PlannedBatchDataset` (map-style, one task =
    one item, no DataLoader-side batching).  The DataLoader sends tasks to its workers
    round-robin, ``prefetch_factor`` per worker ahead, and returns the results in task
    order (``in_order``), so the trainer receives exactly the plan order whatever
    ``num_workers`` is.  A worker loads and processes the task's utterances with the
    sample processor at the task's epoch and collates them; since every task carries its
    epoch, persistent workers need no notification of ``set_epoch``.

What the trainer sees
    Iterating an :class:`AsrDataLoader` yields batch dicts (``keys``, ``feats``,
    ``feats_lengths``, ``target``, ``target_lengths``, and ``skipped``: the
    ``asrkit.data.processors.Skip`` of the batch's utterances dropped for data faults; a
    batch whose utterances were all skipped, or a planned empty batch, has ``B = 0`` and
    is still yielded so that ranks stay in step).  A batch counts as consumed when it is
    handed over, so ``state_dict()`` never counts batches that workers have only
    prefetched.  ``loader.skip_stats`` counts the skips of the batches handed over in
    the current pass.

Signals
    Workers ignore SIGTERM and SIGINT (:func:`init_worker`).  torchrun and SLURM signal a
    rank's whole process group, workers included; the training process handles the signal
    at its next optimizer step (``asrkit.train.preemption``) and still needs its workers
    until then.  Workers end when the training process shuts the DataLoader down, and on
    Linux they are killed the moment the training process dies (``PR_SET_PDEATHSIG``): a
    worker outliving a killed rank would hold that rank's sockets open and delay the other
    ranks' notice of its death.
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import signal
import sys
from typing import Any, Iterator, Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from asrkit.data.processors import SkipStats
from asrkit.data.sampler import EpochPlanner, RankBatchSampler

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BatchTask:
    """One planned batch: utterance ``indices`` (into the data list) to be processed at
    ``epoch``; ``position`` is its place in the rank's epoch."""

    epoch: int
    position: int
    indices: tuple[int, ...]
    pad_to: Optional[tuple[int, int]] = None  # (frames, target length): a bucket_frames batch's edges


class PlannedBatchDataset(Dataset):
    """Map-style dataset indexed by :class:`BatchTask`: ``dataset[task]`` processes the
    task's list entries with ``sample_processor(entry, epoch)`` and collates them with
    ``sample_processor.collate`` (utterances dropped as ``Skip`` end up in the batch's
    ``skipped`` list).  Returns ``{"position", "epoch", "batch"}``."""

    def __init__(self, entries: Sequence[Any], sample_processor):
        self.entries = entries
        self.sample_processor = sample_processor

    def __getitem__(self, task: BatchTask) -> dict:
        if not isinstance(task, BatchTask):
            raise TypeError(f"PlannedBatchDataset is indexed by BatchTask, got {type(task).__name__}")
        samples = [self.sample_processor(self.entries[i], task.epoch) for i in task.indices]
        batch = (self.sample_processor.collate(samples, pad_to=task.pad_to) if task.pad_to is not None
                 else self.sample_processor.collate(samples))
        return {"position": task.position, "epoch": task.epoch, "batch": batch}


class _PassTasks(Sampler):
    """The tasks of the current pass, in order; the DataLoader iterates it in the
    training process each time an iteration starts."""

    def __init__(self):
        self.tasks: list[BatchTask] = []

    def __iter__(self) -> Iterator[BatchTask]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)


def _as_is(item):
    return item


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def init_worker(worker_id: int = 0) -> None:
    """DataLoader ``worker_init_fn`` (see the module docstring): ignore SIGTERM and SIGINT,
    and on Linux die with the training process -- with the thread that started the worker,
    strictly, so iterate the loader from the main thread (the trainer does)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: torch's parent watchdog remains
            return
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(0)


class AsrDataLoader:
    """One rank's loader over one data list (see the module docstring).

    ``set_epoch(e)`` before each epoch; ``len(loader)`` is this rank's batch count of the
    current epoch (equal on every rank); ``state_dict()``/``load_state_dict()`` save and
    restore the consumed position (``asrkit.data.sampler.RankBatchSampler``).
    """

    def __init__(self, entries: Sequence[Any], sample_processor, sampler: RankBatchSampler, *,
                 num_workers: int = 0, prefetch_factor: int = 2, persistent_workers: bool = True,
                 pin_memory: bool = True):
        if len(entries) != len(sampler.planner):
            raise ValueError(f"{len(entries)} entries but the plan has {len(sampler.planner)} utterances")
        self.sampler = sampler
        self.skip_stats = SkipStats()
        self._pass_tasks = _PassTasks()
        workers = num_workers > 0
        self.dataloader = DataLoader(
            PlannedBatchDataset(entries, sample_processor),
            sampler=self._pass_tasks,
            batch_size=None,
            collate_fn=_as_is,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor if workers else None,
            persistent_workers=persistent_workers and workers,
            pin_memory=pin_memory and torch.cuda.is_available(),
            in_order=True,  # results in task order: the consumed order is the plan order
            worker_init_fn=init_worker if workers else None,
            # The DataLoader draws its workers' base seed at every new iterator; from the global
            # RNG that draw would shift dropout after a resume.  Workers need no randomness of
            # their own (augmentation is seeded per sample), so a private generator suffices.
            generator=torch.Generator().manual_seed(0),
        )

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch`` (keeps a position restored for that epoch)."""
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[dict]:
        """One pass over this rank's batches of the current epoch: from position 0, or
        from the restored position on the first pass after :meth:`load_state_dict`."""
        epoch = self.sampler.epoch
        planned = self.sampler.start_pass()
        self.skip_stats.reset()
        planner = self.sampler.planner
        self._pass_tasks.tasks = [BatchTask(epoch, position, tuple(int(i) for i in indices),
                                            planner.pad_to(indices, epoch))
                                  for position, indices in planned]
        if not planned:
            return
        expected = iter(self._pass_tasks.tasks)
        for item in self.dataloader:
            task = next(expected)
            if item["position"] != task.position or item["epoch"] != task.epoch:
                raise RuntimeError(f"DataLoader returned batch {item['position']} of epoch {item['epoch']} "
                                   f"where batch {task.position} of epoch {task.epoch} was due")
            batch = item["batch"]
            for skip in batch["skipped"]:
                self.skip_stats.add(skip)
            self.sampler.mark_consumed(task.position)
            yield batch

    def state_dict(self) -> dict:
        """Position of the batches handed to the trainer (plain Python types)."""
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore a position; the next pass yields exactly the batches not yet consumed."""
        self.sampler.load_state_dict(state)


def planned_speeds(dataset_conf, *, train: bool) -> tuple[float, ...] | None:
    """The speed-perturbation factors a training loader applies (None: no perturbation);
    the plan uses them to know every utterance's real length (see ``asrkit.data.sampler``)."""
    if train and dataset_conf.speed_perturb:
        return tuple(dataset_conf.speeds)
    return None


def build_dataloader(entries: Sequence[Any], dataset_conf, sample_processor, *, train: bool, seed: int,
                     rank: int, world_size: int, mix=None) -> AsrDataLoader:
    """The loader of rank ``rank`` of ``world_size`` over ``entries``
    (``asrkit.data.lists.read_list``), planned per ``dataset_conf`` (the root config's
    ``asrkit.data.schema.DatasetConf``) and processed by ``sample_processor``
    (``asrkit.data.processors.build_sample_processor`` with the same ``train``).

    ``train=False`` (CV/test) never shuffles and never repeats an utterance: each one is
    in exactly one batch of one rank.  ``seed`` seeds the plan (pass the run's seed, the
    same on every rank).  ``rank``/``world_size`` are explicit so that a rank's loader can
    be built (and tested) without ``torch.distributed``.  ``mix``: ``(index ranges, weights)``
    of weighted training lists concatenated in ``entries`` (``asrkit.data.mixing``)."""
    planner = EpochPlanner.from_entries(entries, dataset_conf, train=train, seed=seed,
                                        speeds=planned_speeds(dataset_conf, train=train), mix=mix)
    sampler = RankBatchSampler(planner, rank=rank, world_size=world_size)
    loader = AsrDataLoader(entries, sample_processor, sampler, num_workers=dataset_conf.num_workers,
                           prefetch_factor=dataset_conf.prefetch_factor,
                           persistent_workers=dataset_conf.persistent_workers,
                           pin_memory=dataset_conf.pin_memory)
    logger.info("%s loader rank %d/%d: %d utterances, %s batches, %d per rank in epoch 0, %d workers",
                "train" if train else "cv", rank, world_size, len(entries), dataset_conf.batch_conf.batch_type,
                len(loader), dataset_conf.num_workers)
    return loader
