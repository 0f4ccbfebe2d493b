"""Batch recognition of a data list by a model :mod:`asrkit.trained_model` loaded: features
through the (non-training) data chain, every requested mode from one encoder pass,
real-time-factor accounting, and the results written and scored (:func:`write_text`,
:func:`score_modes`)."""
from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Optional, Sequence

from asrkit.data.processors import Skip, SkipStats
from asrkit.decode.batch import decode
from asrkit.decode.fusion import Fusion
from asrkit.decode.modes import check_modes, fused_modes
from asrkit.decode.options import DecodingOptions, build_fusion
from asrkit.metrics import format_alignment, score
from asrkit.models import AsrModel
from asrkit.progress import ProgressReport

log = logging.getLogger("asrkit.recognize")


@dataclasses.dataclass
class Progress:
    """Running totals; ``rtf`` = wall time / audio seconds, ``model_rtf`` counts only
    encoder + searches (not audio loading and features).  ``utts`` and ``audio_s`` count
    the decoded utterances; ``skips`` the skipped ones, per reason (each logged once)."""

    utts: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0
    model_s: float = 0.0
    skips: SkipStats = dataclasses.field(default_factory=SkipStats)

    @property
    def skipped(self) -> int:
        return self.skips.total

    @property
    def rtf(self) -> float:
        return self.wall_s / self.audio_s if self.audio_s else 0.0

    @property
    def model_rtf(self) -> float:
        return self.model_s / self.audio_s if self.audio_s else 0.0

    def line(self, total: int) -> str:
        return (f"{self.utts}/{total} utts, {self.audio_s:.1f} s audio in {self.wall_s:.1f} s: "
                f"RTF {self.rtf:.4f} (model {self.model_rtf:.4f}), skipped {self.skipped}")


def duration_batches(entries: Sequence, batch_size: int) -> list[list[int]]:
    """Indices of ``entries`` grouped ``batch_size`` at a time in order of decreasing
    duration (little padding)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(entries)), key=lambda i: -entries[i].duration)
    return [order[i: i + batch_size] for i in range(0, len(order), batch_size)]


def recognize(model: AsrModel, entries: Sequence, processor, tokenizer, options: DecodingOptions, *,
              device: str = "cpu", log_every_s: float = 10.0,
              progress: Optional[Progress] = None, fusion: Optional[Fusion] = None) -> dict[str, dict[str, str]]:
    """Decode ``entries`` (``asrkit.data.lists.ListEntry``, unique keys: ValueError
    otherwise) with ``processor`` (from ``build_sample_processor(..., train=False,
    apply_filter=False, labels=False)``: the audio alone is read) in every mode of ``options``, ``options.batch_size`` utterances per
    :func:`asrkit.decode.batch.decode`.

    Returns ``{mode: {key: text}}`` of the decoded utterances, in the order of ``entries``.
    An utterance that cannot be decoded is left out of every mode and counted in
    ``progress.skips`` with its reason (each logged once): a data fault of its audio
    (missing, unreadable, empty, ...: ``asrkit.data.processors``), or ``too_short``, fewer
    feature frames than the encoder's minimum input.  A mode the model cannot run raises
    :class:`asrkit.decode.modes.ModeError` before anything is decoded.  Progress
    (:class:`asrkit.progress.ProgressReport`): a bar over the utterances when stderr is a
    terminal, else a log line every ``log_every_s`` seconds.
    ``fusion``: the LM and context graph of ``options``
    (:func:`asrkit.decode.options.build_fusion`; built here from ``tokenizer`` when ``None``)."""
    modes = check_modes(model, options.modes)
    if len({e.key for e in entries}) != len(entries):  # (read_list refuses such lists, naming the lines)
        raise ValueError("the entries repeat a key: results are keyed by utterance, each key must be unique")
    if fusion is None and options.fused:
        fusion = build_fusion(options, tokenizer)
    if fusion is not None:
        parts = ([f"LM {options.lm_path} (lm_weight {options.lm_weight}, word_bonus {options.word_bonus})"]
                 if options.lm_path else [])
        parts += ([f"{len(options.context_phrases)} context phrases (score {options.context_graph_score})"]
                  if options.context_phrases else [])
        log.info("%s (modes %s)", ", ".join(parts), " ".join(fused_modes(modes)))
    log.info("decoding %d utterances in modes %s (beam %d, batch %d, %s)", len(entries), " ".join(modes),
             options.beam_size, options.batch_size, options.encoder_context())
    progress = progress if progress is not None else Progress()
    texts: dict[str, list[Optional[str]]] = {m: [None] * len(entries) for m in modes}
    min_frames = model.encoder.min_input_length
    start = time.perf_counter()
    report = ProgressReport(len(entries), "decode", "utt", log, every_s=log_every_s,
                            line=lambda: progress.line(len(entries)))
    for indices in duration_batches(entries, options.batch_size):
        samples = [processor(entries[i], 0) for i in indices]
        batch = processor.collate(samples)
        for skip in batch["skipped"]:
            progress.skips.add(skip)
        position = {entries[i].key: i for i in indices}
        kept = [position[k] for k in batch["keys"]]
        lengths = batch["feats_lengths"]
        long_enough = lengths >= min_frames
        for row in (~long_enough).nonzero().flatten().tolist():
            progress.skips.add(Skip(batch["keys"][row], "too_short", f"{int(lengths[row])} feature frames, fewer "
                                    f"than the model's minimum input of {min_frames}"))
        rows = long_enough.nonzero().flatten()
        if rows.numel():
            t0 = time.perf_counter()
            feats = batch["feats"][rows].to(device)
            feats = feats[:, : int(lengths[rows].max())]
            hyps = decode(model, feats, lengths[rows].to(device), options, fusion)
            progress.model_s += time.perf_counter() - t0
            for mode in modes:
                for j, row in enumerate(rows.tolist()):
                    texts[mode][kept[row]] = tokenizer.decode(hyps[mode][j])
            progress.utts += rows.numel()
            progress.audio_s += sum(entries[kept[row]].duration for row in rows.tolist())
        progress.wall_s = time.perf_counter() - start
        report.advance(len(indices))
    report.close()
    progress.wall_s = time.perf_counter() - start
    log.info("done: %s", progress.line(len(entries)))
    return {mode: {entries[i].key: t for i, t in enumerate(texts[mode]) if t is not None} for mode in modes}


def write_text(path: str | Path, texts: dict[str, str]) -> None:
    """Kaldi ``text``: ``key transcript`` per line (``key`` alone for an empty one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for key, text in texts.items():
            f.write(f"{key} {text}\n" if text else f"{key}\n")


def unscored_line(skips: SkipStats, unlabelled: int) -> str:
    """What a score leaves out, in one line: ``not scored: 2 skipped (1 missing_file, 1
    too_short), 3 without transcript``."""
    reasons = skips.reasons()
    return (f"not scored: {skips.total} skipped" + (f" ({reasons})" if reasons else "")
            + f", {unlabelled} without transcript")


def write_scores(path: Path, refs: dict[str, str], hyps: dict[str, str], unit: str, unscored: str) -> str:
    """Write ``path`` (a mode's ``wer``): the alignment of every utterance of ``refs`` (the
    decoded utterances' transcripts) with its hypothesis in ``hyps`` (which holds one for each,
    and maybe others: not scored), the Kaldi totals
    (``%WER``/``%CER``, ``%SER``), then ``scored N utterances; <unscored>`` (what the score
    leaves out: :func:`unscored_line`).  Returns the totals line and that last line."""
    totals, details = score(refs, {key: hyps[key] for key in refs}, unit)  # (the unlabelled ones left out)
    label = "CER" if unit == "char" else "WER"
    rate = totals.summary(label)
    with open(path, "w", encoding="utf-8") as f:
        for key, alignment in details:
            f.write(format_alignment(key, alignment, label) + "\n")
        f.write(f"{rate}\n{totals.sentence_summary()}\nscored {totals.utts} utterances; {unscored}\n")
    return f"{rate}; scored {totals.utts} utterances, {unscored}"


def score_modes(result_dir: Path, entries: Sequence, results: dict[str, dict[str, str]], unit: str,
                skips: SkipStats) -> None:
    """``--score``: each mode's ``wer`` over the decoded utterances with a transcript
    (:func:`write_scores`); the skipped ones and those without a transcript are counted
    apart, never as errors.  With no such utterance there is nothing to score: one log line,
    and no ``wer`` (one left by an earlier decode into ``result_dir`` is removed: it scored
    other hypotheses)."""
    decoded = next(iter(results.values()), {})  # (every mode decodes the same utterances)
    refs = {e.key: e.txt for e in entries if e.key in decoded and e.txt is not None}
    unscored = unscored_line(skips, len(decoded) - len(refs))
    if not refs:
        for mode in results:
            (result_dir / mode / "wer").unlink(missing_ok=True)
        log.info("nothing to score: no decoded utterance has a transcript (%s); hypotheses written to %s",
                 unscored, result_dir)
        return
    for mode, texts in results.items():
        log.info("%s: %s", mode, write_scores(result_dir / mode / "wer", refs, texts, unit, unscored))
