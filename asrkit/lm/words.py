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

from asrkit.metrics import tokenize

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"


def lm_words(text: str) -> list[str]:
    """The LM words of ``text``: whitespace-separated fields, each CJK character a word --
    the words WER counts (:func:`asrkit.metrics.tokenize`), so the LM scores what is scored."""
    return tokenize(text, "word")
