"""How the executor reads a rank's train loader: one batch ahead, with the resume position
kept at the batch being trained (see ``asrkit.train.executor`` for why it reads ahead)."""
from __future__ import annotations

from typing import Iterable, Iterator


def read_ahead(batches: Iterable) -> Iterator[tuple[dict, bool]]:
    """``(batch, has_next)`` for each batch of ``batches``: the next batch is read before a
    batch is yielded, so ``has_next`` says whether this rank has another one.  Local only
    (no collective)."""
    it = iter(batches)
    try:
        current = next(it)
    except StopIteration:
        return
    for following in it:
        yield current, True
        current = following
    yield current, False


def mark_consumed(loader, position: int) -> None:
    """Record that the batch at ``position`` is being trained (the resume position), undoing
    the loader's count of the batch :func:`read_ahead` read beyond it."""
    mark = getattr(getattr(loader, "sampler", None), "mark_consumed", None)
    if mark is not None:
        mark(position)


def consumed_position(loader) -> int:
    """Batches of the current epoch the trainer already consumed (non-zero after a resume)."""
    sampler = getattr(loader, "sampler", None)
    return int(getattr(sampler, "consumed", 0)) if sampler is not None else 0
