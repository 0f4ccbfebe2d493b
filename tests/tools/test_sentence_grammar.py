"""The sentences task's grammar: vocabulary size, closure and determinism."""
from __future__ import annotations

from collections import Counter

import numpy as np

from tools import sentence_grammar


def test_vocabulary_is_large_and_every_word_is_reachable():
    vocab = sentence_grammar.vocabulary()
    assert len(vocab) >= 500
    rng = np.random.default_rng(0)
    counts = Counter(w for _ in range(20000) for w in sentence_grammar.sentence(rng).split())
    assert set(counts) <= vocab          # the grammar produces no word outside the vocabulary
    assert set(counts) == vocab          # and vocabulary() lists nothing it never produces
    assert all(w.isascii() and w.isalpha() and w.islower() for w in vocab)


def test_no_listed_homophones_and_sentence_lengths():
    vocab = sentence_grammar.vocabulary()
    for pair in [("two", "too"), ("four", "for"), ("week", "weak"), ("right", "write"), ("their", "there")]:
        assert len(vocab & set(pair)) <= 1, pair
    rng = np.random.default_rng(1)
    lengths = [len(sentence_grammar.sentence(rng).split()) for _ in range(2000)]
    assert 4 <= min(lengths) and max(lengths) <= 12 and 6 < np.mean(lengths) < 9


def test_sentences_are_a_pure_function_of_the_generator():
    a = [sentence_grammar.sentence(np.random.default_rng([5, i])) for i in range(50)]
    b = [sentence_grammar.sentence(np.random.default_rng([5, i])) for i in range(50)]
    assert a == b and len(set(a)) > 45
