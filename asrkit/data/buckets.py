"""Shape-bounded length buckets (``batch_type: bucket_frames``) and plan statistics.

Why: a GPU step's kernels are selected (and in half precision, built) per batch shape, and
the decoder and attention see the batch size, the padded frames and the padded target
length.  ``dynamic`` batches pad each batch to its own longest utterance, so nearly every
batch is a new shape; ``bucket_frames`` pads every batch to its bucket's edges, so an epoch
has about two shapes per bucket.

Layout (:class:`BucketLayout`, fixed for the whole run: the same in every epoch)
    * Frame edges: ``bucket_boundaries`` when given (WeNet's rule: bucket ``i`` takes
      planned lengths ``< bucket_boundaries[i]``, the last bucket the rest), else
      ``num_buckets`` edges chosen to minimise the padded frames of the list
      (:func:`optimal_edges`: an exact dynamic programme over the length histogram, on
      multiples of :data:`EDGE_MULTIPLE` frames).  With speed perturbation the histogram
      holds every utterance at every speed (each equally likely), so the edges fit the
      lengths the epochs really plan.
    * Padded frames of bucket ``i``: the longest planned length it can hold
      (``boundary - 1``); the last bucket's: the longest planned length of the list at any speed.
    * Padded target length of bucket ``i``: the most planned tokens of any utterance that
      can fall into it (at any speed).  Planned tokens come from the list's transcripts
      (:func:`planned_tokens`: non-space characters, exact for character units).
    * Batch size of bucket ``i``: ``bucket_batch_sizes[i]`` when given, else the frame
      budget ``max(1, max_frames_in_batch // padded frames)``.
Batches (:func:`bucket_frames_batches`)
    WeNet's bucket batching (``asrkit.data.batch_plan.bucket_batches``) over the epoch's
    whole shuffled order (the shuffle buffer is the epoch): a bucket becomes a batch when it
    holds its batch size; each bucket's rest is one last, smaller batch.  Shapes per epoch:
    one per bucket for the full batches, at most one more per bucket for its rest, plus the
    batches split to deal equal counts to the ranks.
Collate
    The loader passes each batch's :meth:`BucketLayout.pad_to` to the collate, which pads
    ``feats`` and ``target`` to those lengths; a batch longer than planned (features that
    yield more frames than 100 a second, a tokenizer that yields more units than
    characters) is padded to its own length rounded up to :data:`OVERFLOW_MULTIPLE`.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from asrkit.data.batch_plan import bucket_batches, planned_frames

EDGE_MULTIPLE = 8      # automatic frame edges are multiples of this
OVERFLOW_MULTIPLE = 16  # a batch longer than its bucket's edge is padded to a multiple of this


def planned_tokens(texts: Sequence[Optional[str]]) -> np.ndarray:
    """Planned target length of each transcript: its non-space characters (0 without one)."""
    return np.fromiter((sum(1 for c in t if not c.isspace()) if t else 0 for t in texts),
                       dtype=np.int64, count=len(texts))


def optimal_edges(frames: np.ndarray, weights: np.ndarray, count: int, multiple: int = EDGE_MULTIPLE) -> list[int]:
    """At most ``count`` increasing edges (multiples of ``multiple``, the last >= the
    longest length) minimising ``sum(weight x edge of the length's bucket)``, where a
    length goes to the first edge >= it: the padded frames of the list."""
    bins = -(-np.asarray(frames, dtype=np.int64) // multiple)  # the edge (in multiples) each length needs
    values, inverse = np.unique(bins, return_inverse=True)
    mass = np.bincount(inverse, weights=weights).astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(mass)])  # cum[j]: mass of the first j values
    v = len(values)
    count = max(1, min(count, v))  # (splitting a bucket never adds padding: use all of them)
    edge = values.astype(np.float64)
    # best[j]: least padded frames of the first j values in k buckets, the last ending at value j - 1
    best = np.concatenate([[0.0], edge * cum[1:]])
    i = np.arange(v + 1)
    usable = i[None, :] < i[:, None]  # [j, i]: the last bucket holds values i..j-1
    args = []
    for k in range(2, count + 1):
        cost = best[None, :] + np.concatenate([[0.0], edge])[:, None] * (cum[:, None] - cum[None, :])
        cost = np.where(usable & (i[None, :] >= k - 1), cost, np.inf)
        arg = np.argmin(cost, axis=1)
        best = cost[i, arg]
        args.append(arg)
    edges, j = [int(values[v - 1]) * multiple], v
    for arg in reversed(args):
        j = int(arg[j])
        edges.append(int(values[j - 1]) * multiple)
    return sorted(edges)


@dataclasses.dataclass(frozen=True)
class BucketLayout:
    """Boundaries (WeNet's ``< boundary`` rule), padded frames, padded target length and
    batch size of each bucket (see the module docstring)."""

    boundaries: tuple[int, ...]
    frame_edges: tuple[int, ...]
    token_edges: tuple[int, ...]
    batch_sizes: tuple[int, ...]

    @classmethod
    def build(cls, durations: np.ndarray, tokens: np.ndarray, speeds: Sequence[float] | None, *,
              boundaries: Sequence[int], batch_sizes: Sequence[int], num_buckets: int,
              max_frames_in_batch: int) -> "BucketLayout":
        per_speed = [planned_frames(durations / s) for s in (speeds or (1.0,))]
        every = np.concatenate(per_speed)
        longest = int(every.max())
        if boundaries:
            bounds = [int(b) for b in boundaries]
        else:
            edges = optimal_edges(every, np.ones(len(every)), num_buckets)
            bounds = [e + 1 for e in edges[:-1]]
        frame_edges = [b - 1 for b in bounds] + [longest]  # (a last bucket that nothing reaches stays empty)
        token_edges = np.zeros(len(frame_edges), dtype=np.int64)
        for f in per_speed:
            np.maximum.at(token_edges, np.searchsorted(np.asarray(bounds, dtype=np.int64), f, side="right"), tokens)
        sizes = list(batch_sizes) if batch_sizes else \
            [max(1, max_frames_in_batch // e) for e in frame_edges]
        return cls(tuple(bounds), tuple(frame_edges), tuple(int(t) for t in np.maximum(token_edges, 1)),
                   tuple(int(s) for s in sizes))

    def bucket_of(self, frames: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.boundaries, dtype=np.int64), frames, side="right")

    def pad_to(self, batch_frames: np.ndarray) -> tuple[int, int]:
        """(padded frames, padded target length) of a batch with these planned frames."""
        if len(batch_frames) == 0:
            return 0, 0
        b = int(self.bucket_of(np.asarray([int(np.max(batch_frames))]))[0])
        return self.frame_edges[b], self.token_edges[b]

    def describe(self) -> str:
        return ", ".join(f"{b}x{f}x{t}" for b, f, t in zip(self.batch_sizes, self.frame_edges, self.token_edges))


def bucket_frames_batches(order: np.ndarray, frames: np.ndarray, layout: BucketLayout) -> list[np.ndarray]:
    """The epoch's batches: WeNet's bucket batching with the layout's boundaries and sizes."""
    return bucket_batches(order, frames, layout.boundaries, layout.batch_sizes)


def padded_length(actual: int, edge: int) -> int:
    """What the collate pads a batch's longest ``actual`` to when its planned edge is ``edge``
    (0: no edge, pad to the longest)."""
    if edge <= 0 or actual <= edge:
        return max(actual, edge)
    return -(-actual // OVERFLOW_MULTIPLE) * OVERFLOW_MULTIPLE


def plan_stats(batches: Sequence[np.ndarray], frames: np.ndarray, tokens: np.ndarray,
               layout: BucketLayout | None) -> dict:
    """Padding shares (frames, tokens) and distinct shapes ``(batch size, padded frames,
    padded target length)`` of planned ``batches`` (empty batches left out), from planned
    lengths: each batch padded to its own longest, or to its bucket's edges with ``layout``."""
    shapes = set()
    real_f = pad_f = real_t = pad_t = 0
    for b in batches:
        if not len(b):
            continue
        f, t = frames[b], tokens[b]
        edge_f, edge_t = layout.pad_to(f) if layout is not None else (0, 0)
        tf, tt = padded_length(int(f.max()), edge_f), padded_length(int(t.max()), edge_t)
        shapes.add((len(b), tf, tt))
        real_f += int(f.sum())
        pad_f += len(b) * tf
        real_t += int(t.sum())
        pad_t += len(b) * tt
    return {"batches": sum(1 for b in batches if len(b)), "shapes": len(shapes),
            "frame_padding": 1 - real_f / max(pad_f, 1), "token_padding": 1 - real_t / max(pad_t, 1)}
