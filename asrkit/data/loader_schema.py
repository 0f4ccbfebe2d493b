"""``dataset_conf`` keys owned by the epoch plan and the loader
(``asrkit.data.batch_plan``, ``asrkit.data.sampler``, ``asrkit.data.dataset``).

WeNet key names are kept (``list_shuffle``, ``shuffle``, ``shuffle_conf.shuffle_size``,
``sort``, ``sort_conf.sort_size``, ``batch_conf.{batch_type, batch_size,
max_frames_in_batch, bucket_boundaries, bucket_batch_sizes}``); their meaning in asrkit
is stated exactly in ``asrkit.data.sampler``.  WeNet passes the DataLoader options as
``train.py`` flags; asrkit keeps them here, beside the data they load
(``dataset_conf.num_workers`` etc.), so one YAML describes the whole input pipeline and
``--override dataset_conf.num_workers=4`` changes them from the command line.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, Optional

from asrkit.schema import WenetKey, checked, non_negative, off, positive


def _optional_positive(value) -> Optional[str]:
    return None if value is None else positive(value)


@dataclasses.dataclass
class ListShuffleConf:
    """``list_shuffle_conf``: the list lines (tars of a shard list, utterances of a raw
    list) are permuted within consecutive windows of ``shuffle_size`` lines; ``null``
    (the default) permutes the whole list."""

    shuffle_size: Optional[int] = checked(None, _optional_positive)


@dataclasses.dataclass
class ShuffleConf:
    """``shuffle_conf``: utterances are permuted within consecutive windows of
    ``shuffle_size`` utterances (WeNet's shuffle buffer, made part of the epoch plan)."""

    shuffle_size: int = checked(10000, positive)


@dataclasses.dataclass
class SortConf:
    """``sort_conf``: utterances are sorted by length within consecutive windows of
    ``sort_size`` utterances (WeNet's sort buffer, made part of the epoch plan)."""

    sort_size: int = checked(500, positive)


@dataclasses.dataclass
class BatchConf:
    """``batch_conf``: how utterances are grouped into batches.

    * ``static``: ``batch_size`` utterances per batch.
    * ``dynamic``: as many utterances as fit ``max_frames_in_batch`` padded frames
      (longest planned length in the batch x utterance count).
    * ``bucket``: utterances of planned length < ``bucket_boundaries[i]`` (first such i)
      go to bucket i; a bucket becomes a batch when it holds ``bucket_batch_sizes[i]``
      utterances; ``bucket_batch_sizes`` has one more entry than ``bucket_boundaries``
      (the last bucket takes everything longer).
    * ``bucket_frames`` (asrkit's, for GPUs: a bounded set of batch shapes): buckets by
      planned length over the whole shuffled epoch, every batch padded to its bucket's
      frame edge and target-length edge; ``bucket_boundaries`` as for ``bucket`` or, when
      empty, ``num_buckets`` edges chosen to minimise the padding; batch sizes
      ``bucket_batch_sizes`` or, when empty, the frame budget
      ``max_frames_in_batch // bucket edge`` (see ``asrkit.data.buckets``).
    Lengths are planned frames: 100 per second of listed duration (see
    ``asrkit.data.batch_plan.planned_frames``).
    """

    batch_type: Literal["static", "dynamic", "bucket", "bucket_frames"] = "static"
    batch_size: int = checked(16, positive)
    max_frames_in_batch: int = checked(12000, positive)
    bucket_boundaries: list[int] = dataclasses.field(default_factory=list)
    bucket_batch_sizes: list[int] = dataclasses.field(default_factory=list)
    num_buckets: int = checked(16, positive)

    def validate(self) -> list[str]:
        if self.batch_type not in ("bucket", "bucket_frames"):
            return []
        errors = []
        bounds, sizes = self.bucket_boundaries, self.bucket_batch_sizes
        if self.batch_type == "bucket_frames" and not bounds:
            if sizes and len(sizes) != self.num_buckets:
                errors.append(f"bucket_batch_sizes: needs num_buckets = {self.num_buckets} entries "
                              f"(or none: from max_frames_in_batch), got {len(sizes)}")
            return errors
        if self.batch_type == "bucket_frames" and not sizes:
            sizes = [1] * (len(bounds) + 1)  # from the frame budget
        if not bounds:
            errors.append("bucket_boundaries: batch_type bucket needs at least one boundary")
        if any(b <= 0 for b in bounds) or any(a >= b for a, b in zip(bounds, bounds[1:])):
            errors.append(f"bucket_boundaries: must be positive and strictly increasing, got {bounds}")
        if len(sizes) != len(bounds) + 1:
            errors.append(f"bucket_batch_sizes: needs len(bucket_boundaries) + 1 = {len(bounds) + 1} "
                          f"entries, got {len(sizes)}")
        if any(s <= 0 for s in sizes):
            errors.append(f"bucket_batch_sizes: must all be > 0, got {sizes}")
        return errors


@dataclasses.dataclass
class LoaderKeys:
    """Epoch-plan and DataLoader keys of ``dataset_conf``.

    ``list_shuffle``/``shuffle``/``sort`` and their ``*_conf`` are used for training
    loaders; a CV/test loader never shuffles (``sort`` still applies).  DataLoader options:
    ``num_workers`` worker processes per rank (0 = load in the training process);
    ``prefetch_factor`` batches in flight per worker (ignored when ``num_workers`` is 0);
    ``persistent_workers`` keeps the workers between epochs (epoch changes still reach
    them: each batch task carries its epoch); ``pin_memory`` pins batches for faster
    host-to-GPU copies and is used only when CUDA is available.
    """

    list_shuffle: bool = True
    list_shuffle_conf: ListShuffleConf = dataclasses.field(default_factory=ListShuffleConf)
    shuffle: bool = True
    shuffle_conf: ShuffleConf = dataclasses.field(default_factory=ShuffleConf)
    sort: bool = True
    sort_conf: SortConf = dataclasses.field(default_factory=SortConf)
    batch_conf: BatchConf = dataclasses.field(default_factory=BatchConf)
    num_workers: int = checked(0, non_negative)
    prefetch_factor: int = checked(2, positive)
    persistent_workers: bool = True
    pin_memory: bool = True

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "cycle": off(1, feature="repeating the list `cycle` times inside one epoch (an asrkit epoch "
                                "is one pass; raise max_epoch instead)"),
    }
