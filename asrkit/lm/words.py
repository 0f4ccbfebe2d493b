"""What a language model's "words" are, one rule for estimating it and for decoding with it.

:func:`lm_words` splits a transcript at whitespace and makes every CJK character a word of
its own (:func:`asrkit.text.cjk.is_cjk`): English text gives a word n-gram, Chinese text
(written without spaces: AISHELL) a *character* n-gram, mixed text both.  A word LM of
Chinese needs a segmenter first (jieba, pkuseg): segment the training text *and* map the
hypotheses the same way -- asrkit does not, so it models characters there
(docs/decoding.md).

The special words are KenLM's and SRILM's: ``<s>``, ``</s>``, ``<unk>``.
"""
from __future__ import annotations

from asrkit.text.cjk import is_cjk

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"


def lm_words(text: str) -> list[str]:
    """The LM words of ``text``: whitespace-separated fields, each CJK character a word."""
    words: list[str] = []
    for field in text.split():
        run = ""
        for ch in field:
            if is_cjk(ch):
                if run:
                    words.append(run)
                    run = ""
                words.append(ch)
            else:
                run += ch
        if run:
            words.append(run)
    return words
