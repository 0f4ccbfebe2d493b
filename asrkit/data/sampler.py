"""Epoch plans: which utterances form which batch, on which rank, in which order.

The plan of an epoch is computed from list metadata alone (durations and shard
membership; no audio is read), identically on every rank, by :class:`EpochPlanner`, and
each rank walks its share with a :class:`RankBatchSampler`, which also records how far
the trainer got.

Plan of epoch ``e`` (training loader)
    1. ``list_shuffle``: the list lines -- the tars of a shard list, the utterances of a
       raw list -- are permuted (within windows of ``list_shuffle_conf.shuffle_size``
       lines; default: all at once).  Members of one tar stay together, in tar order.
    2. ``shuffle``: utterances are permuted within consecutive windows of
       ``shuffle_conf.shuffle_size`` (WeNet's shuffle buffer as a plan step).
    3. ``sort``: utterances are sorted by planned frames within consecutive windows of
       ``sort_conf.sort_size`` (WeNet's sort buffer as a plan step).
    4. Batching per ``batch_conf`` (static / dynamic / bucket, see
       ``asrkit.data.batch_plan``; bucket_frames: shape-bounded buckets over the whole
       shuffled epoch, each batch padded to its bucket's edges, see ``asrkit.data.buckets``).
    5. If the loader shuffles (``list_shuffle`` or ``shuffle``), the batch order is
       permuted, so sorted windows do not give the epoch a length trend.
    Randomness of step ``k`` comes from ``numpy.random.default_rng([seed, e, k])``: the
    same on all ranks and in every run, different for every epoch.
    With weighted training lists (``asrkit.data.mixing``) step 1 starts from the epoch's
    selection -- whole groups drawn per list -- and permutes the selected groups.
    A CV/test loader (``train=False``) skips steps 1, 2 and 5: list order, sorted within
    windows when ``sort`` is on.

Dealing to ranks: equal batch counts, nothing lost, nothing repeated
    The ``N`` batches of the plan are made a multiple of the world size ``W`` by
    ``asrkit.data.batch_plan.split_to_multiple``: ``(-N) % W`` batches are split (the
    largest ones; a split batch becomes near-equal halves, thirds...) -- no utterance is
    dropped or repeated, in training or in CV.  Only when there are fewer utterances than
    the ``ceil(N / W) x W`` batches needed (a list shorter than the world, or batches of
    one utterance each) are empty batches appended (``collate`` of an empty batch gives
    ``B = 0``; the trainer must still take part in collective calls for it).  Rank ``r`` gets
    batches ``r, r + W, r + 2W, ...``: every rank has exactly ``ceil(N / W)`` batches and
    every utterance is in exactly one batch of one rank, every epoch.

Dealing to workers
    The DataLoader (``asrkit.data.dataset``) hands a rank's batches to its workers
    round-robin as tasks ``(epoch, position, utterance indices)`` and returns results in
    task order, so the trainer receives the rank's batches in plan order for any
    ``num_workers``, persistent or not, and a new epoch reaches persistent workers with
    the tasks themselves.

Position and resume
    ``consumed`` counts the batches handed to the trainer in the current epoch (counted in
    the training process when a batch is handed over, never when a worker produces it).
    ``state_dict()`` stores epoch, consumed, world size, the deal history and a
    fingerprint of the plan inputs.  After ``load_state_dict()`` the next pass of that
    epoch yields exactly the batches at positions ``consumed, consumed + 1, ...``; the
    skipped batches are never loaded.  A different data list or plan configuration
    (fingerprint mismatch) is refused with ``ValueError``.
    Under a different world size ``W'`` the epoch is re-dealt deterministically: the
    batches consumed so far are the first ``consumed x W`` batches of the old deal; the
    remaining ones (empty ones dropped) are made a multiple of ``W'`` as above and dealt
    round-robin to the ``W'`` ranks, which continue at position ``consumed``.  Every
    utterance not yet trained on this epoch is trained on exactly once.
"""
from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Sequence

import numpy as np

from asrkit.data.batch_plan import (bucket_batches, dynamic_batches, permute_groups, permute_within_windows,
                                  planned_frames, sort_within_windows, split_to_multiple, static_batches)
from asrkit.data.buckets import BucketLayout, bucket_frames_batches, plan_stats, planned_tokens
from asrkit.data.mixing import epoch_selection
from asrkit.data.processors import draw_speed

logger = logging.getLogger(__name__)

_STAGE_LIST_SHUFFLE, _STAGE_SHUFFLE, _STAGE_BATCH_ORDER = 1, 2, 3
STATE_KEYS = ("epoch", "consumed", "world_size", "segments", "fingerprint")


def group_ids(tars: Sequence[str | None]) -> np.ndarray:
    """Group id of each utterance: members of one tar share an id, an utterance without a
    tar is a group of its own; ids count groups in order of first appearance."""
    ids: dict[str, int] = {}
    out = np.empty(len(tars), dtype=np.int64)
    next_id = 0
    for i, tar in enumerate(tars):
        if tar is None:
            out[i] = next_id
            next_id += 1
        else:
            if tar not in ids:
                ids[tar] = next_id
                next_id += 1
            out[i] = ids[tar]
    return out


class EpochPlanner:
    """Deterministic epoch plans from list metadata (see the module docstring).

    ``keys``, ``durations`` (seconds) and ``tars`` (shard path or ``None``) describe the
    list in list order; ``conf`` is the ``dataset_conf`` (any object with the
    ``asrkit.data.loader_schema.LoaderKeys`` attributes).  ``speeds``: the speed
    perturbation factors of a training loader (None: no perturbation); each utterance is
    then planned at the length it really gets in that epoch,
    ``duration / asrkit.data.processors.draw_speed(seed, epoch, key, speeds)``, so sorting
    and ``max_frames_in_batch`` see the perturbed lengths (see ``asrkit.data.batch_plan``).
    ``tokens``: planned target lengths (``asrkit.data.buckets.planned_tokens``; None: 0),
    for the padded target length of ``bucket_frames`` and the plan statistics."""

    def __init__(self, keys: Sequence[str], durations: Sequence[float], tars: Sequence[str | None],
                 conf: Any, *, train: bool, seed: int, speeds: Sequence[float] | None = None,
                 mix: tuple[Sequence[tuple[int, int]], Sequence[float]] | None = None,
                 tokens: Sequence[int] | None = None):
        if not (len(keys) == len(durations) == len(tars)):
            raise ValueError("keys, durations and tars must have one item per utterance")
        if len(keys) == 0:
            raise ValueError("the data list is empty: nothing to plan")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.train = bool(train)
        self.seed = seed
        self.keys = list(keys)
        self.durations = np.asarray(durations, dtype=np.float64)
        self.speeds = tuple(float(v) for v in speeds) if speeds and self.train else None
        self.frames = planned_frames(durations)
        self.groups = group_ids(tars)
        self.tokens = np.zeros(len(keys), dtype=np.int64) if tokens is None else np.asarray(tokens, dtype=np.int64)
        self._frames_cache: tuple[int, np.ndarray] | None = None
        # weighted lists: (the lists' index ranges, their weights); a CV loader never mixes
        self.mix = (tuple((int(a), int(b)) for a, b in mix[0]), tuple(float(w) for w in mix[1])) \
            if mix is not None and self.train else None
        batch_conf = conf.batch_conf
        self.settings = {
            "speeds": list(self.speeds) if self.speeds else None,
            "list_shuffle": bool(conf.list_shuffle) and self.train,
            "list_shuffle_size": conf.list_shuffle_conf.shuffle_size,
            "shuffle": bool(conf.shuffle) and self.train,
            "shuffle_size": conf.shuffle_conf.shuffle_size,
            "sort": bool(conf.sort),
            "sort_size": conf.sort_conf.sort_size,
            "batch_type": batch_conf.batch_type,
            "batch_size": batch_conf.batch_size,
            "max_frames_in_batch": batch_conf.max_frames_in_batch,
            "bucket_boundaries": list(batch_conf.bucket_boundaries),
            "bucket_batch_sizes": list(batch_conf.bucket_batch_sizes),
            "num_buckets": batch_conf.num_buckets,
            "mix": [list(map(list, self.mix[0])), list(self.mix[1])] if self.mix else None,
        }
        self.fingerprint = self._fingerprint(keys)
        self.layout = BucketLayout.build(
            self.durations, self.tokens, self.speeds, boundaries=batch_conf.bucket_boundaries,
            batch_sizes=batch_conf.bucket_batch_sizes, num_buckets=batch_conf.num_buckets,
            max_frames_in_batch=batch_conf.max_frames_in_batch) if batch_conf.batch_type == "bucket_frames" else None

    @classmethod
    def from_entries(cls, entries: Sequence[Any], conf: Any, *, train: bool, seed: int,
                     speeds: Sequence[float] | None = None, mix=None) -> "EpochPlanner":
        """Planner for ``asrkit.data.lists.ListEntry`` items (uses ``key``, ``duration``, ``tar``)."""
        return cls([e.key for e in entries], [e.duration for e in entries], [e.tar for e in entries],
                   conf, train=train, seed=seed, speeds=speeds, mix=mix,
                   tokens=planned_tokens([e.txt for e in entries]))

    def frames_of(self, epoch: int) -> np.ndarray:
        """Planned frames of every utterance in ``epoch`` (speed-perturbed when configured)."""
        if self.speeds is None:
            return self.frames
        if self._frames_cache is None or self._frames_cache[0] != epoch:
            drawn = np.fromiter((draw_speed(self.seed, epoch, k, self.speeds) for k in self.keys),
                                dtype=np.float64, count=len(self.keys))
            self._frames_cache = (epoch, planned_frames(self.durations / drawn))
        return self._frames_cache[1]

    def __len__(self) -> int:
        return len(self.frames)

    def _fingerprint(self, keys: Sequence[str]) -> str:
        h = hashlib.sha256()
        h.update(json.dumps({"settings": self.settings, "seed": self.seed, "train": self.train},
                            sort_keys=True).encode())
        h.update("\n".join(keys).encode("utf-8", "surrogatepass"))
        h.update(self.frames.tobytes())
        h.update(self.groups.tobytes())
        return h.hexdigest()[:32]

    def _rng(self, epoch: int, stage: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, stage])

    def utterance_order(self, epoch: int) -> np.ndarray:
        """Utterance indices after plan steps 1-3 (list shuffle, shuffle, sort)."""
        s = self.settings
        order = np.arange(len(self.frames), dtype=np.int64)
        if self.mix is not None:
            selected = epoch_selection(self.groups, self.mix[0], self.mix[1], self.seed, epoch)
            if s["list_shuffle"]:
                perm = permute_within_windows(np.arange(len(selected)), s["list_shuffle_size"] or max(1, len(selected)),
                                              self._rng(epoch, _STAGE_LIST_SHUFFLE))
                selected = [selected[i] for i in perm]
            order = np.concatenate(selected).astype(np.int64)
        elif s["list_shuffle"]:
            order = permute_groups(self.groups, s["list_shuffle_size"], self._rng(epoch, _STAGE_LIST_SHUFFLE))
        if s["shuffle"]:
            order = permute_within_windows(order, s["shuffle_size"], self._rng(epoch, _STAGE_SHUFFLE))
        if s["sort"]:
            order = sort_within_windows(order, self.frames_of(epoch), s["sort_size"])
        return order

    def batches(self, epoch: int) -> list[np.ndarray]:
        """All batches of ``epoch`` in plan order, before dealing to ranks (each an int64
        array of utterance indices; every utterance in exactly one batch)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        s = self.settings
        order = self.utterance_order(epoch)
        frames = self.frames_of(epoch)
        # static and dynamic batches never span two sort windows: a batch across a window
        # boundary would join the longest utterances of one window with the shortest of the next
        windows = (np.split(order, range(s["sort_size"], len(order), s["sort_size"])) if s["sort"]
                   else [order])
        if s["batch_type"] == "static":
            batches = [b for w in windows for b in static_batches(w, s["batch_size"])]
        elif s["batch_type"] == "dynamic":
            batches = [b for w in windows for b in dynamic_batches(w, frames, s["max_frames_in_batch"])]
        elif s["batch_type"] == "bucket":
            batches = bucket_batches(order, frames, s["bucket_boundaries"], s["bucket_batch_sizes"])
        elif s["batch_type"] == "bucket_frames":
            batches = bucket_frames_batches(order, frames, self.layout)
        else:
            raise ValueError(f"unknown batch_type {s['batch_type']!r}")
        if s["list_shuffle"] or s["shuffle"]:
            perm = self._rng(epoch, _STAGE_BATCH_ORDER).permutation(len(batches))
            batches = [batches[i] for i in perm]
        return batches

    def pad_to(self, indices: np.ndarray, epoch: int) -> tuple[int, int] | None:
        """(padded frames, padded target length) the collate pads a batch to: its
        bucket's edges with ``bucket_frames``, else None (each batch to its longest)."""
        return None if self.layout is None else self.layout.pad_to(self.frames_of(epoch)[np.asarray(indices)])

    def plan_stats(self, epoch: int, world_size: int = 1) -> dict:
        """Batches, distinct shapes and padding shares of ``epoch`` dealt to ``world_size``
        ranks, from planned lengths (``asrkit.data.buckets.plan_stats``)."""
        dealt = split_to_multiple([b for b in self.batches(epoch) if len(b)], world_size)
        return plan_stats(dealt, self.frames_of(epoch), self.tokens, self.layout)


def deal_segments(batches: list[np.ndarray], segments: Sequence[tuple[int, int]],
                  rank: int) -> tuple[int, list[np.ndarray]]:
    """Rank ``rank``'s batches of the last deal segment.

    ``segments`` is the deal history of one epoch: ``[(0, W0), (p1, W1), ...]`` -- the
    epoch was dealt to ``W0`` ranks, and after each rank consumed ``p1`` batches the
    rest was re-dealt to ``W1`` ranks, and so on.  Returns ``(first_position,
    rank_batches)``: the rank's batches from position ``first_position`` on."""
    remaining = batches
    dealt: list[np.ndarray] = []
    for i, (start, world) in enumerate(segments):
        dealt = split_to_multiple([b for b in remaining if len(b)], world)
        if i + 1 < len(segments):
            used = segments[i + 1][0] - start
            if used < 0 or used * world > len(dealt):
                raise ValueError(f"corrupt sampler deal history {list(segments)}: segment {i} has "
                                 f"{len(dealt) // world} batches per rank, {used} consumed")
            remaining = dealt[used * world:]
    start, world = segments[-1]
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside world size {world}")
    return start, dealt[rank::world]


class RankBatchSampler:
    """One rank's walk through the epoch plans, with its consumed position.

    ``set_epoch(e)`` selects epoch ``e`` (position 0), unless a state restored by
    ``load_state_dict`` for epoch ``e`` is still pending, which it keeps.  Each pass
    (``start_pass``) yields the rank's batches of the current epoch from position 0, or
    from the restored position for the first pass after ``load_state_dict``.  The
    training process calls ``mark_consumed(position)`` when it hands that batch to the
    trainer.  ``len()`` is the rank's batch count of the current epoch (including
    batches consumed before a resume)."""

    def __init__(self, planner: EpochPlanner, *, rank: int, world_size: int):
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
        self.planner = planner
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.consumed = 0
        self._segments: list[tuple[int, int]] = [(0, world_size)]
        self._resume_pending = False
        self._cache: tuple[Any, tuple[int, list[np.ndarray]]] | None = None

    # ------------------------------------------------------------------ plan
    def _schedule(self) -> tuple[int, list[np.ndarray]]:
        key = (self.epoch, tuple(self._segments))
        if self._cache is None or self._cache[0] != key:
            if self._cache is None or self._cache[0][0] != self.epoch:
                self._log_plan()
            self._cache = (key, deal_segments(self.planner.batches(self.epoch), self._segments, self.rank))
        return self._cache[1]

    def _log_plan(self) -> None:
        if self.rank != 0 or not logger.isEnabledFor(logging.INFO):
            return
        st = self.planner.plan_stats(self.epoch, self.world_size)
        layout = self.planner.layout
        logger.info("epoch %d plan: %d batches (%s), %d distinct shapes (batch size, frames, target length), "
                    "padding %.1f %% of frames, %.1f %% of target units%s", self.epoch, st["batches"],
                    self.planner.settings["batch_type"], st["shapes"], 100 * st["frame_padding"],
                    100 * st["token_padding"], f"; buckets (size x frames x units): {layout.describe()}"
                    if layout is not None else "")

    def __len__(self) -> int:
        first, batches = self._schedule()
        return first + len(batches)

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch`` (see the class docstring)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        if self._resume_pending and epoch == self.epoch:
            return
        if self._resume_pending and 0 < self.consumed < len(self):
            logger.warning("sampler: restored position (epoch %d, %d batches consumed) discarded by "
                           "set_epoch(%d)", self.epoch, self.consumed, epoch)
        self.epoch = epoch
        self.consumed = 0
        self._segments = [(0, self.world_size)]
        self._resume_pending = False

    def start_pass(self) -> list[tuple[int, np.ndarray]]:
        """``(position, utterance indices)`` of the batches this pass yields, in order."""
        if self._resume_pending:
            start = self.consumed
            self._resume_pending = False
        else:
            start = 0
            self.consumed = 0
            self._segments = [(0, self.world_size)]
        first, batches = self._schedule()
        return [(first + j, b) for j, b in enumerate(batches) if first + j >= start]

    def mark_consumed(self, position: int) -> None:
        """The batch at ``position`` was handed to the trainer."""
        self.consumed = position + 1

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Plain-Python position state (loads with ``torch.load(weights_only=True)``)."""
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "world_size": self.world_size,
            "segments": [[int(s), int(w)] for s, w in self._segments],
            "fingerprint": self.planner.fingerprint,
            "batches_per_rank": len(self),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by :meth:`state_dict` (on this or another world size;
        see the module docstring).  Raises ``ValueError`` for a state of another list or
        plan configuration, or a malformed one."""
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"sampler state lacks {missing}; got keys {sorted(state)}")
        if state["fingerprint"] != self.planner.fingerprint:
            raise ValueError(
                "sampler state was saved for another data list or another shuffle/sort/batch/seed "
                f"configuration (plan fingerprint {state['fingerprint']} != {self.planner.fingerprint}); "
                "resuming mid-epoch would train on the wrong batches. Start the epoch afresh instead.")
        epoch, consumed, saved_world = int(state["epoch"]), int(state["consumed"]), int(state["world_size"])
        segments = [(int(s), int(w)) for s, w in state["segments"]]
        if (not segments or segments[0][0] != 0 or segments[-1][1] != saved_world or epoch < 0
                or any(w < 1 for _, w in segments) or any(a[0] > b[0] for a, b in zip(segments, segments[1:]))):
            raise ValueError(f"malformed sampler state: epoch {epoch}, world size {saved_world}, "
                             f"segments {segments}")
        first, batches = deal_segments(self.planner.batches(epoch), segments, 0)
        if not first <= consumed <= first + len(batches):
            raise ValueError(f"malformed sampler state: {consumed} batches consumed, but epoch {epoch} "
                             f"has batches {first}..{first + len(batches)} in its last deal")
        if saved_world != self.world_size:
            segments = [(0, self.world_size)] if consumed == 0 else segments + [(consumed, self.world_size)]
            logger.info("sampler: epoch %d resumed at batch %d on %d ranks (saved on %d): the remaining "
                        "batches are re-dealt", epoch, consumed, self.world_size, saved_world)
        self.epoch, self.consumed, self._segments = epoch, consumed, segments
        self._resume_pending = True
