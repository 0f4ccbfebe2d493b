"""What the trainer sums, all-reduces and reports from a model's output dict.

The contract between a model's ``forward`` and the trainer (the model documents its own
entries, e.g. ``asrkit.models.asr_model.AsrModel``): ``forward`` returns a dict of **sums
over the batch**, and the trainer reads it by name only:

* ``loss``: the objective, the only entry that is backpropagated; always reported;
* every other ``loss_<name>`` (a tensor, or None when the model has no such part): summed
  and reported as ``loss_<name>``, normalised like ``loss`` (per utterance, or per token
  with ``length_normalized_loss``); a sum of exactly zero is not reported;
* a pair ``<name>_correct`` / ``<name>_total``: summed, and reported as the ratio
  ``<name>`` = Σ correct / Σ total (not reported while Σ total is zero) -- e.g.
  ``acc_correct``/``acc_total`` -> ``acc``;
* anything else (``num_utts``, ``num_tokens``, ...) is ignored here.

Names are reported in the order the model's dict first gives them: ``loss``, then the
``loss_<name>`` entries, then the ratios.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping


def summed_names(out: Mapping) -> list[str]:
    """The entries of one output dict the trainer sums (``loss``, ``loss_*``, and both halves
    of every ``*_correct``/``*_total`` pair), in the dict's order; None entries left out."""
    names = []
    for key, value in out.items():
        if value is None:
            continue
        if key == "loss" or key.startswith("loss_"):
            names.append(key)
        elif key.endswith("_correct") and out.get(key[:-len("_correct")] + "_total") is not None:
            names.append(key)
        elif key.endswith("_total") and out.get(key[:-len("_total")] + "_correct") is not None:
            names.append(key)
    return names


def merge_names(lists: Iterable[Iterable[str]]) -> list[str]:
    """The union of several name lists, in order of first appearance (deterministic: every
    rank merging the same gathered lists gets the same list)."""
    merged: list[str] = []
    for names in lists:
        merged.extend(n for n in names if n not in merged)
    return merged


def report(sums: Mapping[str, float], normalise: Callable[[float], float]) -> dict[str, float]:
    """The reported numbers from summed entries: ``loss`` and the non-zero ``loss_<name>``
    sums through ``normalise``, then the ratios ``<name>`` of the pairs whose total is
    non-zero (see the module docstring)."""
    out = {"loss": normalise(sums.get("loss", 0.0))}
    for name, value in sums.items():
        if name.startswith("loss_") and value:
            out[name] = normalise(value)
    for name, value in sums.items():
        if name.endswith("_correct"):
            base = name[:-len("_correct")]
            total = sums.get(base + "_total", 0.0)
            if total:
                out[base] = value / total
    return out


class Window:
    """Sums over the batches since the last log line."""

    def __init__(self):
        self.sums: dict[str, float] = {"loss": 0.0}
        self.utts = self.tokens = self.frames = self.batches = 0
        self.data_wait = 0.0
        self.start = time.perf_counter()
        self._pending: list[dict] = []

    def add(self, out: dict, utts: int, tokens: int, frames: int, wait: float) -> None:
        self._pending.append({k: out[k].detach() for k in summed_names(out)})
        self.utts += utts
        self.tokens += tokens
        self.frames += frames
        self.batches += 1
        self.data_wait += wait

    def flush(self) -> None:
        """Move the pending device tensors to Python numbers (one sync per log line)."""
        for item in self._pending:
            for k, v in item.items():
                self.sums[k] = self.sums.get(k, 0.0) + float(v)
        self._pending.clear()

    def train_numbers(self, length_normalized: bool, lr: float, grad_norm: float) -> dict[str, float]:
        """The numbers of a train log line over this window (its pending sums read first):
        ``loss``, ``lr``, ``grad_norm``, ``frames_per_s``, ``data_wait_share`` (of the
        seconds since the window began), then the model's other reported entries
        (:func:`report`), the losses per utterance (per token with ``length_normalized``)."""
        self.flush()
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        per_utt = 1.0 / max(self.tokens if length_normalized else self.utts, 1)
        numbers = {"loss": self.sums["loss"] * per_utt, "lr": lr, "grad_norm": grad_norm,
                   "frames_per_s": self.frames / elapsed, "data_wait_share": self.data_wait / elapsed}
        for k, v in report(self.sums, lambda total: total * per_utt).items():
            if k != "loss":
                numbers[k] = v
        return numbers


def cv_means(summed: tuple[Mapping[str, float], int, int], length_normalized: bool) -> dict:
    """``{"loss", "num_utts", ...}`` of summed CV losses ``(sums, utterances, tokens)``
    (``Executor.cv_sums``): each loss per utterance (per token with
    ``length_normalized_loss``) and the accuracies."""
    total, utts, tokens = summed
    norm = max(tokens if length_normalized else utts, 1)
    reported = report(total, lambda v: v / norm)
    return {"loss": reported.pop("loss"), "num_utts": utts, **reported}
