"""What :meth:`Transcriber.transcribe <asrkit.transcribe.Transcriber.transcribe>` returns:
the text, the unit strings, and per token and per word the time span in seconds.

Times (all in seconds from the start of the audio): a token's ``start`` is
``(segment start frame + first frame of its CTC spike) × subsampling × frame shift`` and its
``end`` is ``(segment start frame + last frame of the spike + 1) × subsampling × frame
shift`` -- the frames are encoder frames (e.g. 40 ms: 4 × 10 ms); see
:mod:`asrkit.decode.alignment` for which frames a spike covers.  A word spans from its first
token's ``start`` to its last token's ``end``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from asrkit.text.cjk import is_cjk
from asrkit.text.units import SPACE


@dataclasses.dataclass(frozen=True)
class TokenTime:
    token: str
    start: float
    end: float


@dataclasses.dataclass(frozen=True)
class WordTime:
    word: str
    start: float
    end: float


@dataclasses.dataclass(frozen=True)
class Transcript:
    """``text``; ``tokens``: the unit strings of the hypothesis; ``token_times`` and
    ``words``: one entry per token / word with its span: a transducer search's emission frame,
    else the token's CTC alignment (``None`` when the model has no CTC head and the mode is no
    transducer search, or when the tokens could not be aligned to the CTC frames -- an
    attention hypothesis longer than the frames allow); ``segments``: the ``(start, end)`` seconds
    of the parts decoded one by one (one part for audio up to the long-audio threshold;
    parts without speech are left out); ``duration``: seconds of audio; ``nbest``: where asked
    for (``Transcriber.transcribe_with_options(nbest=N)``), each part's hypothesis texts, best
    first (the first is the part's text), else ``None`` (not in :meth:`to_dict`)."""

    text: str
    tokens: list[str]
    token_times: Optional[list[TokenTime]]
    words: Optional[list[WordTime]]
    segments: list[tuple[float, float]]
    duration: float
    mode: str
    nbest: Optional[list[list[str]]] = None

    def to_dict(self) -> dict:
        """A JSON-ready dict (times rounded to the millisecond)."""
        def ms(x: float) -> float:
            return round(x, 3)
        return {"text": self.text, "mode": self.mode, "duration": ms(self.duration),
                "tokens": self.tokens,
                "token_times": None if self.token_times is None else
                [{"token": t.token, "start": ms(t.start), "end": ms(t.end)} for t in self.token_times],
                "words": None if self.words is None else
                [{"word": w.word, "start": ms(w.start), "end": ms(w.end)} for w in self.words],
                "segments": [[ms(s), ms(e)] for s, e in self.segments]}


def group_words(times: Sequence[TokenTime], space_separated: bool = False) -> list[WordTime]:
    """Words of ``times`` (one per token, in order).  With ``space_separated`` (units that
    are whole words: ``split_with_space``) every token is a word.  Otherwise a word is a
    run of tokens between boundaries: the unit ``▁`` alone is a boundary (and no part of a
    word), a unit starting with ``▁`` (a sentencepiece word start) begins a new word
    without its ``▁``, and a CJK character is a word by itself."""
    words: list[WordTime] = []
    current: Optional[WordTime] = None  # the word being built
    for t in times:
        if space_separated:
            words.append(WordTime(t.token, t.start, t.end))
            continue
        text = t.token.lstrip(SPACE)  # ("▁" alone: nothing left)
        cjk = bool(text) and all(is_cjk(ch) for ch in text)
        if current is not None and (t.token.startswith(SPACE) or cjk):
            words.append(current)
            current = None
        if not text:
            continue
        current = (WordTime(text, t.start, t.end) if current is None
                   else WordTime(current.word + text, current.start, t.end))
        if cjk:
            words.append(current)
            current = None
    if current is not None:
        words.append(current)
    return words
