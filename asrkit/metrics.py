"""Word and character error rates with Levenshtein alignments.

Tokenisation (:func:`tokenize`):

* ``word`` mode: whitespace-separated words, except that every CJK character is a
  token of its own (CJK text has no word spaces; this is the usual "char mode for CJK").
* ``char`` mode: every character is a token; whitespace is dropped unless
  ``keep_spaces`` (then each run of whitespace between characters is one ``" "`` token).

Normalisation before tokenising: optional case folding and removal of punctuation
(Unicode categories ``P*``); ``"▁"`` (sentencepiece space) is read as a space.

Error rate = (substitutions + deletions + insertions) / reference tokens.  With an empty
reference it is 0 when the hypothesis is empty too, and ``inf`` otherwise.
"""
from __future__ import annotations

import dataclasses
import unicodedata
from typing import Iterable, Literal, Sequence

from asrkit.text.cjk import is_cjk

Mode = Literal["word", "char"]


@dataclasses.dataclass(frozen=True)
class Normalizer:
    ignore_case: bool = False
    remove_punct: bool = False

    def __call__(self, text: str) -> str:
        text = text.replace("\u2581", " ")
        if self.ignore_case:
            text = text.casefold()
        if self.remove_punct:
            text = "".join(" " if unicodedata.category(c).startswith("P") else c for c in text)
        return text


def tokenize(text: str, mode: Mode = "word", keep_spaces: bool = False) -> list[str]:
    """Split ``text`` into scoring tokens (see the module docstring)."""
    if mode == "char":
        if not keep_spaces:
            return [c for c in text if not c.isspace()]
        return [" " if part == "" else part for part in _chars_with_spaces(text)]
    if mode != "word":
        raise ValueError(f"mode must be 'word' or 'char', got {mode!r}")
    tokens: list[str] = []
    for word in text.split():
        current = ""
        for ch in word:
            if is_cjk(ch):
                if current:
                    tokens.append(current)
                    current = ""
                tokens.append(ch)
            else:
                current += ch
        if current:
            tokens.append(current)
    return tokens


def _chars_with_spaces(text: str) -> list[str]:
    """Characters of ``text`` with each inner whitespace run as one empty-string marker."""
    out: list[str] = []
    for word in text.split():
        if out:
            out.append("")
        out.extend(word)
    return out


@dataclasses.dataclass
class Alignment:
    """One utterance: counts and the aligned pairs (``None`` marks a gap)."""

    ref_len: int
    sub: int
    dels: int
    ins: int
    pairs: list[tuple[str | None, str | None]]

    @property
    def errors(self) -> int:
        return self.sub + self.dels + self.ins

    @property
    def correct(self) -> int:
        return self.ref_len - self.sub - self.dels


def align(ref: Sequence[str], hyp: Sequence[str]) -> Alignment:
    """Minimum-edit-distance alignment (unit costs).  Among equally cheap alignments the
    backtrace prefers match/substitution, then deletion, then insertion."""
    n, m = len(ref), len(hyp)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        cost[i][0] = i
    for j in range(1, m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        row, prev = cost[i], cost[i - 1]
        r = ref[i - 1]
        for j in range(1, m + 1):
            diagonal = prev[j - 1] + (r != hyp[j - 1])
            row[j] = min(diagonal, prev[j] + 1, row[j - 1] + 1)
    pairs: list[tuple[str | None, str | None]] = []
    sub = dels = ins = 0
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            sub += ref[i - 1] != hyp[j - 1]
            pairs.append((ref[i - 1], hyp[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            dels += 1
            pairs.append((ref[i - 1], None))
            i -= 1
        else:
            ins += 1
            pairs.append((None, hyp[j - 1]))
            j -= 1
    pairs.reverse()
    return Alignment(n, sub, dels, ins, pairs)


def error_rate(errors: int, total: int) -> float:
    """``errors / total``; with ``total == 0``: 0.0 if no errors else ``inf``."""
    if total == 0:
        return 0.0 if errors == 0 else float("inf")
    return errors / total


@dataclasses.dataclass
class Totals:
    """Corpus totals over scored utterances."""

    ref_len: int = 0
    sub: int = 0
    dels: int = 0
    ins: int = 0
    utts: int = 0
    utts_wrong: int = 0

    def add(self, a: Alignment) -> None:
        self.ref_len += a.ref_len
        self.sub += a.sub
        self.dels += a.dels
        self.ins += a.ins
        self.utts += 1
        self.utts_wrong += a.errors > 0

    @property
    def errors(self) -> int:
        return self.sub + self.dels + self.ins

    @property
    def rate(self) -> float:
        return error_rate(self.errors, self.ref_len)

    def summary(self, label: str = "WER") -> str:
        """Kaldi's line: ``%WER 12.50 [ 2 / 16, 1 ins, 0 del, 1 sub ]``."""
        return (f"%{label} {100 * self.rate:.2f} [ {self.errors} / {self.ref_len}, "
                f"{self.ins} ins, {self.dels} del, {self.sub} sub ]")

    def sentence_summary(self) -> str:
        return f"%SER {100 * error_rate(self.utts_wrong, self.utts):.2f} [ {self.utts_wrong} / {self.utts} ]"


def format_alignment(key: str, a: Alignment, label: str = "WER") -> str:
    """Per-utterance block: rate line, then ref/hyp rows aligned column by column
    (``*`` fills gaps) and an op row (``S``/``D``/``I``)."""
    width = [max(len(r or "*"), len(h or "*")) for r, h in a.pairs]
    ref = " ".join((r or "*").ljust(w) for (r, _), w in zip(a.pairs, width))
    hyp = " ".join((h or "*").ljust(w) for (_, h), w in zip(a.pairs, width))
    ops = " ".join(("D" if h is None else "I" if r is None else "S" if r != h else "").ljust(w)
                   for (r, h), w in zip(a.pairs, width))
    rate = 100 * error_rate(a.errors, a.ref_len)
    return (f"utt: {key}\n{label}: {rate:.2f} % N={a.ref_len} C={a.correct} S={a.sub} "
            f"D={a.dels} I={a.ins}\nref: {ref.rstrip()}\nhyp: {hyp.rstrip()}\nops: {ops.rstrip()}\n")


def score(refs: dict[str, str], hyps: dict[str, str], mode: Mode = "word", keep_spaces: bool = False,
          normalizer: Normalizer = Normalizer()) -> tuple[Totals, list[tuple[str, Alignment]]]:
    """Align every reference utterance with its hypothesis (a missing hypothesis counts
    as empty).  A hypothesis key absent from ``refs`` is an error."""
    extra = sorted(set(hyps) - set(refs))
    if extra:
        shown = ", ".join(extra[:5]) + (" ..." if len(extra) > 5 else "")
        raise ValueError(f"{len(extra)} hypothesis key(s) not in the reference: {shown}")
    totals = Totals()
    details = []
    for key in refs:
        a = align(tokenize(normalizer(refs[key]), mode, keep_spaces),
                  tokenize(normalizer(hyps.get(key, "")), mode, keep_spaces))
        totals.add(a)
        details.append((key, a))
    return totals, details


def read_text(lines: Iterable[str], source: str = "text") -> dict[str, str]:
    """Kaldi ``text``: ``key transcript`` per line (transcript may be empty)."""
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        key = parts[0]
        if key in out:
            raise ValueError(f"{source}:{number}: duplicate key {key!r}")
        out[key] = parts[1] if len(parts) > 1 else ""
    return out
