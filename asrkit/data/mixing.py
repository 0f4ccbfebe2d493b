"""Several training lists in one run -- a new domain with the old data mixed in (icefall's
fine-tuning recipe; WeNet's ``--train_data a.list b.list``).

``--train_data a.list b.list``: unweighted, every utterance of every list once per epoch
(the lists concatenated).  ``--train_data a.list:0.7 b.list:0.3``: weighted, each epoch
holds as many utterances as the lists together (``N``), ``round(N · w_i / Σw)`` of them
from list ``i``: a list smaller than its share is repeated (whole passes over a fresh
permutation each), a larger one sampled (a different part each epoch).  Which utterances
an epoch takes is drawn from ``(seed, epoch, list)`` alone (:func:`epoch_selection`), so
every rank plans the same epoch and a resumed run the same as an uninterrupted one; the
plan then shuffles, sorts, batches and deals it like any list (``asrkit.data.sampler``).

Selection is by group: the members of one shard tar are taken together (as the plan keeps
them together), so a weighted shard list gets its share to within one tar.  An utterance
taken twice in one epoch gets the same augmentation draw both times (the draws are seeded
by seed, epoch and key).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

_STAGE_SELECT = 4  # (the sampler's plan stages are 1-3)


class ListSpecError(ValueError):
    """A ``--train_data`` item that is not ``PATH`` or ``PATH:WEIGHT``, or weights on some
    lists but not all."""


@dataclasses.dataclass(frozen=True)
class ListMix:
    """The training lists of a run and their weights (None: unweighted, every utterance
    once per epoch)."""

    paths: tuple[str, ...]
    weights: Optional[tuple[float, ...]] = None

    @classmethod
    def parse(cls, items: Sequence[str] | str) -> "ListMix":
        """From ``--train_data`` items: ``PATH`` or ``PATH:WEIGHT`` (a weight > 0; a path
        whose text after its last ``:`` is no number is a plain path)."""
        items = [items] if isinstance(items, str) else list(items)
        if not items:
            raise ListSpecError("--train_data: no list given")
        paths, weights = [], []
        for item in items:
            head, sep, tail = item.rpartition(":")
            weight = None
            if sep and head:
                try:
                    weight = float(tail)
                except ValueError:
                    weight = None
            if weight is None:
                paths.append(item)
                weights.append(None)
                continue
            if not weight > 0 or weight != weight or weight == float("inf"):
                raise ListSpecError(f"--train_data {item}: the weight must be a number > 0")
            paths.append(head)
            weights.append(weight)
        given = [w is not None for w in weights]
        if any(given) and not all(given):
            raise ListSpecError(f"--train_data: weights on some lists but not on all ({' '.join(items)}); give "
                                f"every list a weight (a.list:0.7 b.list:0.3) or none")
        return cls(tuple(paths), tuple(weights) if all(given) else None)

    def __str__(self) -> str:
        if self.weights is None:
            return " ".join(self.paths)
        return " ".join(f"{p}:{w:g}" for p, w in zip(self.paths, self.weights))

    def describe(self, sizes: Sequence[int]) -> str:
        """The log line: each list, its size and its share of an epoch."""
        if self.weights is None:
            return "; ".join(f"{p}: {n} utterances, each once per epoch" for p, n in zip(self.paths, sizes))
        total, shares = sum(sizes), share_counts(sizes, self.weights)
        return "; ".join(f"{p}: {n} utterances, weight {w:g}: {k} per epoch ({k / n:.2f} x the list)"
                         for p, n, w, k in zip(self.paths, sizes, self.weights, shares)) + f" (epoch: {total})"


def share_counts(sizes: Sequence[int], weights: Sequence[float]) -> list[int]:
    """Utterances per epoch from each list: ``round(N · w_i / Σw)`` with ``N = Σ sizes``."""
    total, mass = sum(sizes), float(sum(weights))
    return [int(round(total * w / mass)) for w in weights]


def epoch_selection(groups: np.ndarray, ranges: Sequence[tuple[int, int]], weights: Sequence[float],
                    seed: int, epoch: int) -> list[np.ndarray]:
    """The groups of utterances epoch ``epoch`` takes, list after list: for list ``i``
    (utterances ``ranges[i]`` of the concatenation, group ids ``groups``), whole groups in
    the order of seeded permutations of the list's groups -- one permutation per pass --
    until its share (:func:`share_counts`) is reached.  Each item is the utterance indices
    of one group, in list order."""
    sizes = [end - start for start, end in ranges]
    out: list[np.ndarray] = []
    for i, ((start, end), want) in enumerate(zip(ranges, share_counts(sizes, weights))):
        members = _group_members(groups[start:end], start)
        rng = np.random.default_rng([seed, epoch, _STAGE_SELECT, i])
        taken = 0
        while taken < want:
            for g in rng.permutation(len(members)):
                out.append(members[g])
                taken += len(members[g])
                if taken >= want:
                    break
    return out


def _group_members(groups: np.ndarray, offset: int) -> list[np.ndarray]:
    """Utterance indices (+ ``offset``) of each group of ``groups``, groups in order of
    appearance (``asrkit.data.sampler.group_ids`` numbers them so: by id is by appearance),
    members in list order."""
    order = np.argsort(groups, kind="stable")
    _, starts = np.unique(groups[order], return_index=True)
    return [(members + offset).astype(np.int64) for members in np.split(order, starts[1:])]
