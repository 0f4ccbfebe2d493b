"""ARPA n-gram language models: reading and writing the text format, and :class:`NgramLm`,
the back-off scorer the searches query (written in TorchScript's subset, like the searches).

The ARPA format (SRILM's, what KenLM's ``lmplz`` writes)::

    \\data\\
    ngram 1=5
    ngram 2=7

    \\1-grams:
    -0.69897	</s>
    -99	<s>	-0.30103
    -0.39794	a	-0.17609
    ...
    \\2-grams:
    -0.30103	<s> a
    ...
    \\end\\

Each line: log10 P(w | history), the words, and (below the highest order) the log10
back-off weight of the n-gram as a history (0 when absent).  The probability of ``w`` after
a history ``h`` is the stored one when ``h w`` is listed, else ``backoff(h) · P(w | h')``
with ``h'`` = ``h`` less its first word, down to the unigrams; a word not in the model is
``<unk>`` (log10 -100 when the model lists no ``<unk>``, as KenLM).

:func:`read_arpa` refuses a file that is not ARPA (no ``\\data\\`` header: a KenLM binary
among them), is truncated (fewer n-grams than its header declares, no ``\\end\\``) or has a
malformed line, with one line (:class:`ArpaError`) naming the file (and the line).  Plain
or gzip-compressed (``.gz``).
"""
# (no ``from __future__ import annotations``: TorchScript reads the annotations of NgramLm)
import dataclasses
import gzip
import math
from pathlib import Path
from typing import Dict, List, Tuple

LN10 = math.log(10.0)
UNK_LOG10 = -100.0  # KenLM's probability of <unk> when a model lists none


class ArpaError(ValueError):
    """A file that is not a complete, well-formed ARPA model (one line naming it)."""


@dataclasses.dataclass
class Arpa:
    """An ARPA model as Python data: ``ngrams[n - 1]`` maps each n-gram (a tuple of words)
    to ``(log10 probability, log10 back-off weight)``; the back-off is 0.0 where the file
    gives none (the highest order always)."""

    order: int
    ngrams: List[Dict[Tuple[str, ...], Tuple[float, float]]]

    def counts(self) -> List[int]:
        return [len(table) for table in self.ngrams]


def _open_text(path: Path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")


def read_arpa(path) -> Arpa:
    """The model of ARPA file ``path`` (see the module docstring for what is refused)."""
    path = Path(path)
    if not path.is_file():
        raise ArpaError(f"language model not found: {path}")
    declared: List[int] = []
    ngrams: List[Dict[Tuple[str, ...], Tuple[float, float]]] = []
    section = "start"  # start -> data -> n (an n-grams section) -> end
    order = 0
    try:
        with _open_text(path) as f:
            for number, raw in enumerate(f, 1):
                line = raw.strip()
                if not line:
                    continue
                if section == "start":
                    if line == "\\data\\":
                        section = "data"
                    continue
                if line == "\\end\\":
                    section = "end"
                    break
                if line.startswith("\\") and line.endswith("-grams:"):
                    n = _section_order(line, path, number)
                    if section == "data" and n != 1 or section not in ("data", "ngrams") or n != order + 1:
                        raise ArpaError(f"{path}:{number}: unexpected section {line!r}")
                    _check_complete(path, order, declared, ngrams)
                    order = n
                    ngrams.append({})
                    section = "ngrams"
                    continue
                if section == "data":
                    declared.append(_declared_count(line, path, number, len(declared) + 1))
                    continue
                _add_entry(ngrams[order - 1], line, order, order == len(declared), path, number)
    except UnicodeDecodeError:
        raise ArpaError(f"{path}: not an ARPA file (not UTF-8 text; a KenLM binary is not read, "
                        f"give the ARPA file)") from None
    except (OSError, EOFError) as e:
        raise ArpaError(f"{path}: unreadable ({e})") from None
    if section == "start":
        raise ArpaError(f"{path}: not an ARPA file (no \\data\\ header)")
    if not declared:
        raise ArpaError(f"{path}: no 'ngram N=count' lines after \\data\\")
    _check_complete(path, order, declared, ngrams)
    if order != len(declared):
        raise ArpaError(f"{path}: truncated: the header declares {len(declared)}-grams, the file ends "
                        f"after the {order}-grams")
    if section != "end":
        raise ArpaError(f"{path}: truncated: no \\end\\ line")
    return Arpa(order, ngrams)


def _section_order(line: str, path: Path, number: int) -> int:
    try:
        return int(line[1:-len("-grams:")])
    except ValueError:
        raise ArpaError(f"{path}:{number}: malformed section header {line!r}") from None


def _declared_count(line: str, path: Path, number: int, expected_n: int) -> int:
    head, _, count = line.partition("=")
    parts = head.split()
    if len(parts) != 2 or parts[0] != "ngram" or parts[1] != str(expected_n) or not count.strip().isdigit():
        raise ArpaError(f"{path}:{number}: expected 'ngram {expected_n}=COUNT', got {line!r}")
    return int(count)


def _check_complete(path: Path, order: int, declared: List[int], ngrams) -> None:
    if order == 0:
        return
    if order > len(declared):
        raise ArpaError(f"{path}: a {order}-grams section, but the header declares {len(declared)} orders")
    if len(ngrams[order - 1]) != declared[order - 1]:
        raise ArpaError(f"{path}: truncated: {len(ngrams[order - 1])} of the {declared[order - 1]} "
                        f"{order}-grams its header declares")


def _add_entry(table, line: str, n: int, highest: bool, path: Path, number: int) -> None:
    fields = line.split()
    if len(fields) not in (n + 1, n + 2) or (highest and len(fields) == n + 2):
        raise ArpaError(f"{path}:{number}: malformed {n}-gram line {line[:60]!r}")
    try:
        prob = float(fields[0])
        backoff = float(fields[n + 1]) if len(fields) == n + 2 else 0.0
    except ValueError:
        raise ArpaError(f"{path}:{number}: malformed {n}-gram line {line[:60]!r}") from None
    if not (prob <= 0.0 and math.isfinite(backoff)):
        raise ArpaError(f"{path}:{number}: a log10 probability must be <= 0, got {line[:60]!r}")
    table[tuple(fields[1:n + 1])] = (prob, backoff)


def format_arpa(arpa: Arpa) -> str:
    """``arpa`` as ARPA text (n-grams in the order of its tables; back-offs written below the
    highest order, 0 included)."""
    lines = ["", "\\data\\"] + [f"ngram {n}={count}" for n, count in enumerate(arpa.counts(), 1)]
    for n, table in enumerate(arpa.ngrams, 1):
        lines += ["", f"\\{n}-grams:"]
        for words, (prob, backoff) in table.items():
            text = f"{prob:.7g}\t{' '.join(words)}"
            lines.append(text if n == arpa.order else f"{text}\t{backoff:.7g}")
    return "\n".join(lines + ["", "\\end\\", ""])


class NgramLm(object):
    """A back-off n-gram model as integer tables (natural-log scores), for the searches.

    Words are ids (``word_id``: ``<unk>`` for any word not in the model).  A *state* is the
    history the next word is scored after: the longest suffix of the words so far (at most
    ``order − 1``) that the model lists as an n-gram; state 0 is the empty history, ``-1``
    the beginning of a sentence (``<s>``).  ``score(state, word)`` returns ``ln P(word |
    state)`` and the state after it.  Built by :func:`build_ngram_lm`."""

    def __init__(self, order: int, words: Dict[str, int], probs: Dict[int, float], next_state: Dict[int, int],
                 backoffs: List[float], lower: List[int], unk: int, eos: int, begin: int, unk_logprob: float):
        self.order = order
        self.words = words
        self.num_words = len(words)
        self.probs = probs            # state * num_words + word -> ln P(word | state)
        self.next_state = next_state  # the same key -> the state after word
        self.backoffs = backoffs      # state -> ln back-off weight
        self.lower = lower            # state -> the state of its history less the first word (-1 for 0)
        self.unk = unk
        self.eos = eos
        self.begin = begin
        self.unk_logprob = unk_logprob

    def word_id(self, word: str) -> int:
        return self.words.get(word, self.unk)

    def score(self, state: int, word: int) -> Tuple[float, int]:
        """``(ln P(word | state), next state)``; state ``-1`` is the sentence start."""
        if state < 0:
            state = self.begin
        total = 0.0
        key = state * self.num_words + word
        while key not in self.probs and state > 0:
            total += self.backoffs[state]
            state = self.lower[state]
            key = state * self.num_words + word
        if key in self.probs:
            return total + self.probs[key], self.next_state[key]
        return total + self.unk_logprob, 0

    def score_words(self, words: List[str], sentence_end: bool) -> float:
        """``ln P`` of ``words`` after ``<s>`` (and of ``</s>`` after them)."""
        state = -1
        total = 0.0
        for word in words:
            lp, state = self.score(state, self.word_id(word))
            total += lp
        if sentence_end:
            lp, state = self.score(state, self.eos)
            total += lp
        return total


def build_ngram_lm(arpa: Arpa) -> NgramLm:
    """The :class:`NgramLm` of ``arpa``: every listed n-gram below the highest order is a state."""
    vocab = list(arpa.ngrams[0]) if arpa.ngrams else []
    words = {w[0]: i for i, w in enumerate(vocab)}
    for special in ("<unk>", "<s>", "</s>"):
        if special not in words:
            words[special] = len(words)
    num_words = len(words)
    states: Dict[Tuple[str, ...], int] = {(): 0}
    for n in range(1, arpa.order):
        for ngram in arpa.ngrams[n - 1]:
            states[ngram] = len(states)

    def longest_state(ngram: Tuple[str, ...]) -> int:
        ngram = ngram[max(0, len(ngram) - (arpa.order - 1)):]
        while ngram not in states:
            ngram = ngram[1:]
        return states[ngram]

    backoffs = [0.0] * len(states)
    lower = [-1] * len(states)
    for ngram, state in states.items():
        if ngram:
            lower[state] = longest_state(ngram[1:])
            backoffs[state] = arpa.ngrams[len(ngram) - 1][ngram][1] * LN10
    probs: Dict[int, float] = {}
    next_state: Dict[int, int] = {}
    for n in range(1, arpa.order + 1):
        for ngram, (prob, _) in arpa.ngrams[n - 1].items():
            history = states.get(ngram[:-1])
            if history is None:
                raise ArpaError(f"the {n}-gram {' '.join(ngram)!r} has no {n - 1}-gram {' '.join(ngram[:-1])!r}: "
                                f"not a valid back-off model")
            word = words.get(ngram[-1], -1)
            if word < 0:
                raise ArpaError(f"the word {ngram[-1]!r} of the {n}-gram {' '.join(ngram)!r} is not a 1-gram: "
                                f"not a valid back-off model")
            key = history * num_words + word
            probs[key] = prob * LN10
            next_state[key] = longest_state(ngram)
    unk_logprob = probs.get(words["<unk>"], UNK_LOG10 * LN10)
    begin = states.get(("<s>",), 0)
    return NgramLm(arpa.order, words, probs, next_state, backoffs, lower, words["<unk>"], words["</s>"], begin,
                   unk_logprob)


def load_lm(path) -> NgramLm:
    """:func:`build_ngram_lm` of :func:`read_arpa` (raises :class:`ArpaError`)."""
    arpa = read_arpa(path)
    try:
        return build_ngram_lm(arpa)
    except ArpaError as e:
        raise ArpaError(f"{path}: {e}") from None


def log10_prob(lm: NgramLm, history: List[str], word: str) -> float:
    """log10 P(``word`` | ``history``) (a history starting with ``<s>`` starts a sentence)."""
    state = 0
    for w in history:
        if w == "<s>":
            state = -1
            continue
        _, state = lm.score(state, lm.word_id(w))
    return lm.score(state, lm.word_id(word))[0] / LN10
