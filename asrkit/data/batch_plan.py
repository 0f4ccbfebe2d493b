"""Batch formation from list metadata: the pure steps of an epoch plan.

Everything here works on *utterance indices* (positions in the data list) and their
*planned frames*; no audio is read.  ``asrkit.data.sampler`` chains these steps into an
epoch plan.  Every function is deterministic given its inputs (randomness comes in as an
explicit ``numpy.random.Generator``).

Planned frames
    ``planned_frames(d) = max(1, floor(100 * d))`` for a duration of ``d`` seconds: the
    frame count of a 10 ms frame shift.  (Kaldi fbank with a 25 ms window and
    ``snip_edges`` yields ``1 + (samples - 400) // 160`` frames at 16 kHz, one or two
    fewer, so the plan does not under-count.)  Under speed perturbation the sampler passes
    ``d / speed`` with the speed each utterance really gets in the epoch
    (``asrkit.data.processors.draw_speed``), so ``max_frames_in_batch`` and the bucket
    boundaries bound the real padded frames of a batch.
"""
from __future__ import annotations

import heapq
import math
from typing import Sequence

import numpy as np

FRAMES_PER_SECOND = 100


def planned_frames(durations: Sequence[float]) -> np.ndarray:
    """Planned frames of each utterance: ``max(1, floor(100 * d))``, int64.
    Durations must be finite and >= 0 (a 0 duration marks audio whose length could not be
    measured; it is planned as one frame and skipped when loaded)."""
    d = np.asarray(durations, dtype=np.float64)
    bad = np.flatnonzero(~(np.isfinite(d) & (d >= 0)))
    if bad.size:
        raise ValueError(f"list entry {int(bad[0])} has an unplannable duration {d[bad[0]]!r} "
                         f"(durations must be finite and >= 0)")
    return np.maximum(1, np.floor(d * FRAMES_PER_SECOND)).astype(np.int64)


def permute_within_windows(order: np.ndarray, window: int, rng: np.random.Generator) -> np.ndarray:
    """``order`` cut into consecutive windows of ``window`` items (the last may be
    shorter), each window uniformly permuted; windows keep their place."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out = np.array(order, dtype=np.int64, copy=True)
    for start in range(0, len(out), window):
        out[start:start + window] = rng.permutation(out[start:start + window])
    return out


def permute_groups(groups: np.ndarray, window: int | None, rng: np.random.Generator) -> np.ndarray:
    """Utterance order after permuting whole groups.

    ``groups[i]`` is the group id of utterance ``i``; ids number the groups ``0..G-1`` in
    order of first appearance.  The group order is permuted within consecutive windows of
    ``window`` groups (``None``: all groups at once); utterances of one group keep their
    list order and stay together.  Returns utterance indices (int64)."""
    groups = np.asarray(groups, dtype=np.int64)
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    group_order = permute_within_windows(np.arange(n_groups), window or max(1, n_groups), rng)
    rank_of_group = np.empty(n_groups, dtype=np.int64)
    rank_of_group[group_order] = np.arange(n_groups)
    return np.argsort(rank_of_group[groups], kind="stable").astype(np.int64)


def sort_within_windows(order: np.ndarray, frames: np.ndarray, window: int) -> np.ndarray:
    """``order`` cut into consecutive windows of ``window`` items, each window sorted by
    ascending planned frames (stable: equal lengths keep their order)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    order = np.asarray(order, dtype=np.int64)
    window_id = np.arange(len(order)) // window
    return order[np.lexsort((frames[order], window_id))]


def static_batches(order: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive runs of ``batch_size`` utterances; the last batch holds the rest."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = np.asarray(order, dtype=np.int64)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def dynamic_batches(order: np.ndarray, frames: np.ndarray, max_frames_in_batch: int) -> list[np.ndarray]:
    """Consecutive runs of utterances, each as long as its padded size
    ``max(planned frames) x count`` stays <= ``max_frames_in_batch`` (WeNet's dynamic
    batch).  An utterance longer than the limit on its own forms a batch of one."""
    if max_frames_in_batch < 1:
        raise ValueError(f"max_frames_in_batch must be >= 1, got {max_frames_in_batch}")
    order = np.asarray(order, dtype=np.int64)
    cuts = []
    longest = 0
    count = 0
    for pos, f in enumerate(frames[order].tolist()):
        grown = max(longest, f)
        if count and grown * (count + 1) > max_frames_in_batch:
            cuts.append(pos)
            longest, count = f, 1
        else:
            longest, count = grown, count + 1
    return [b for b in np.split(order, cuts) if len(b)]


def bucket_batches(order: np.ndarray, frames: np.ndarray, boundaries: Sequence[int],
                   batch_sizes: Sequence[int]) -> list[np.ndarray]:
    """WeNet's bucket batching.  Utterances are taken in ``order``; one with planned
    frames ``f`` joins bucket ``i`` = the first index with ``f < boundaries[i]`` (else the
    last bucket, ``len(boundaries)``).  A bucket is emitted as a batch the moment it holds
    ``batch_sizes[i]`` utterances; after the last utterance the partly filled buckets are
    emitted in bucket order."""
    if len(batch_sizes) != len(boundaries) + 1:
        raise ValueError(f"bucket_batch_sizes needs {len(boundaries) + 1} entries "
                         f"(len(bucket_boundaries) + 1), got {len(batch_sizes)}")
    order = np.asarray(order, dtype=np.int64)
    bucket_of = np.searchsorted(np.asarray(boundaries, dtype=np.int64), frames[order], side="right")
    open_buckets: list[list[int]] = [[] for _ in batch_sizes]
    batches = []
    for idx, b in zip(order.tolist(), bucket_of.tolist()):
        open_buckets[b].append(idx)
        if len(open_buckets[b]) == batch_sizes[b]:
            batches.append(np.asarray(open_buckets[b], dtype=np.int64))
            open_buckets[b] = []
    batches.extend(np.asarray(rest, dtype=np.int64) for rest in open_buckets if rest)
    return batches


def split_to_multiple(batches: list[np.ndarray], multiple: int) -> list[np.ndarray]:
    """Make the batch count a multiple of ``multiple`` without dropping or repeating an
    utterance.

    Let ``k = (-len(batches)) % multiple``.  ``k`` extra batches are made by splitting:
    one extra piece at a time goes to the batch whose largest piece is currently the
    largest (earliest batch on ties); a batch cut into ``m`` pieces becomes ``m``
    consecutive near-equal runs (``numpy.array_split``) in its place.  Only when every
    piece is down to one utterance and extra batches are still needed are empty batches
    appended at the end (this happens only when the list has fewer utterances than the
    required batch count)."""
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    need = (-len(batches)) % multiple
    if need == 0:
        return list(batches)
    pieces = [1] * len(batches)
    heap = [(-len(b), i) for i, b in enumerate(batches) if len(b) >= 2]
    heapq.heapify(heap)
    while need and heap:
        _, i = heapq.heappop(heap)
        pieces[i] += 1
        need -= 1
        if pieces[i] < len(batches[i]):
            heapq.heappush(heap, (-math.ceil(len(batches[i]) / pieces[i]), i))
    out: list[np.ndarray] = []
    for b, m in zip(batches, pieces):
        out.extend(np.array_split(b, m) if m > 1 else [b])
    out.extend(np.zeros(0, dtype=np.int64) for _ in range(need))
    return out
