"""Modified Kneser-Ney estimation (asrkit.lm.estimate) against probabilities computed by hand,
and the properties every back-off model has: each history's probabilities sum to 1."""
import math
import random

import pytest

from asrkit.lm.arpa import build_ngram_lm, format_arpa, log10_prob, read_arpa
from asrkit.lm.estimate import EstimateError, adjusted_counts, count_ngrams, discounts, estimate

TINY = [["a", "b"], ["a"], ["b", "a", "b"]]


def model_of(tmp_path, sentences, order, **kw):
    """Estimate, write the ARPA text, read it back: the scorer the searches use."""
    path = tmp_path / f"lm{order}.arpa"
    path.write_text(format_arpa(estimate(sentences, order, **kw)), encoding="utf-8")
    return build_ngram_lm(read_arpa(path))


def test_adjusted_counts_are_continuation_counts_except_after_sentence_start():
    counts = count_ngrams(TINY, 2)
    assert counts[1][("a", "b")] == 2 and counts[1][("<s>", "a")] == 2 and counts[1][("a", "</s>")] == 1
    adjusted = adjusted_counts(counts)
    # a follows <s> (twice) and b: 2 distinct words before it; b follows a (twice) and <s>
    assert adjusted[0] == {("a",): 2, ("b",): 2, ("</s>",): 2}
    assert adjusted[1] == counts[1]  # the highest order keeps raw counts
    trigram = adjusted_counts(count_ngrams(TINY, 3))
    assert trigram[1][("<s>", "a")] == 2  # starts with <s>: raw count
    assert trigram[1][("a", "b")] == 2  # after <s> and after b


def test_discounts_from_counts_of_counts():
    """t1..t4 = 4, 2, 1, 1: Y = 4 / (4 + 2·2) = 0.5; D1 = 1 − 2·0.5·2/4, D2 = 2 − 3·0.5·1/2,
    D3+ = 3 − 4·0.5·1/1."""
    adjusted = {("w%d" % i,): c for i, c in enumerate([1, 1, 1, 1, 2, 2, 3, 4])}
    assert discounts(adjusted, 1, fallback=False) == pytest.approx((0.5, 1.25, 1.0))
    with pytest.raises(EstimateError, match="no 1-grams with adjusted count 3.*discount_fallback"):
        discounts({("a",): 1, ("b",): 2}, 1, fallback=False)
    assert discounts({("a",): 1, ("b",): 2}, 1, fallback=True) == (0.5, 1.0, 1.5)


def test_bigram_probabilities_computed_by_hand(tmp_path):
    """TINY, order 2, KenLM's fallback discounts 0.5 1 1.5 (its counts of counts have no 3s).

    Unigrams: adjusted counts a 2, b 2, </s> 2 (sum 6), each discounted by D2 = 1:
    u = 1/6, γ = 3·1/6 = 1/2 spread over |V| = 4 words (</s> <unk> a b):
    P(a) = P(b) = P(</s>) = 1/6 + 1/8 = 7/24, P(<unk>) = 1/8.
    After <s>: a 2, b 1 (sum 3): γ = (1 + 0.5)/3 = 1/2;
    P(a|<s>) = 1/3 + 1/2·7/24 = 23/48, P(b|<s>) = 0.5/3 + 7/48 = 15/48,
    P(</s>|<s>) = 7/48 (back-off), P(<unk>|<s>) = 3/48.
    After a: b 2, </s> 1 -> P(b|a) = 23/48, P(</s>|a) = 15/48; after b: </s> 23/48, a 15/48."""
    lm = model_of(tmp_path, TINY, 2, discount_fallback=True)
    expected = {
        ((), "a"): 7 / 24, ((), "b"): 7 / 24, ((), "</s>"): 7 / 24, ((), "<unk>"): 1 / 8,
        (("<s>",), "a"): 23 / 48, (("<s>",), "b"): 15 / 48, (("<s>",), "</s>"): 7 / 48,
        (("<s>",), "<unk>"): 3 / 48, (("a",), "b"): 23 / 48, (("a",), "</s>"): 15 / 48,
        (("a",), "a"): 7 / 48, (("b",), "</s>"): 23 / 48, (("b",), "a"): 15 / 48,
        (("b",), "zebra"): 3 / 48,  # not in the model: <unk>
    }
    for (history, word), p in expected.items():
        assert 10 ** log10_prob(lm, list(history), word) == pytest.approx(p, abs=1e-6), (history, word)
    arpa = read_arpa(tmp_path / "lm2.arpa")
    assert arpa.ngrams[0][("<s>",)] == (-99.0, pytest.approx(math.log10(0.5), abs=1e-6))
    assert arpa.ngrams[0][("a",)][1] == pytest.approx(math.log10(0.5), abs=1e-6)
    assert ("<s>", "</s>") not in arpa.ngrams[1]  # unseen: given by the back-off
    # a sentence: P(a|<s>) P(b|a) P(</s>|b)
    assert math.exp(lm.score_words(["a", "b"], True)) == pytest.approx(23 / 48 * 23 / 48 * 23 / 48, rel=1e-5)


def test_tiny_text_without_fallback_is_refused_in_one_line():
    with pytest.raises(EstimateError) as e:
        estimate(TINY, 2)
    assert "\n" not in str(e.value) and "discount_fallback" in str(e.value)


def random_corpus(seed: int, sentences: int = 300):
    rng = random.Random(seed)
    words = ["w%d" % i for i in range(12)]
    return [[rng.choice(words[:rng.randint(2, 12)]) for _ in range(rng.randint(1, 9))] for _ in range(sentences)]


@pytest.mark.parametrize("order, prune", [(2, ()), (3, ()), (4, ()), (3, (0, 1)), (4, (0, 0, 1, 2))])
def test_every_history_sums_to_one(tmp_path, order, prune):
    """Σ_w P(w | h) = 1 (w over the vocabulary less <s>, <unk> included) for the empty history,
    every history the model lists, and a history it has never seen."""
    corpus = random_corpus(order)
    lm = model_of(tmp_path, corpus, order, prune=prune, discount_fallback=True)
    arpa = read_arpa(tmp_path / f"lm{order}.arpa")
    vocab = [w for w in lm.words if w != "<s>"]
    histories = [()] + [g for table in arpa.ngrams[:-1] for g in table] + [("w3", "never", "w1")]
    for history in histories:
        total = sum(10 ** log10_prob(lm, list(history), w) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-6), history
    if prune:
        unpruned = estimate(corpus, order, discount_fallback=True)
        assert sum(arpa.counts()) < sum(unpruned.counts())


def test_pruning_keeps_the_histories_of_kept_ngrams():
    arpa = estimate(random_corpus(7), 3, prune=(0, 1, 5), discount_fallback=True)
    for n in (2, 3):
        for g in arpa.ngrams[n - 1]:
            assert g[:-1] in arpa.ngrams[n - 2], g  # every history listed (ARPA's rule)


@pytest.mark.parametrize("prune, message", [((1,), "unigrams cannot be pruned"), ((0, 2, 1), "must not decrease"),
                                            ((0, -1), "must be >= 0")])
def test_bad_prune_thresholds(prune, message):
    with pytest.raises(EstimateError, match=message):
        estimate(TINY, 3, prune=prune, discount_fallback=True)


def test_kenlm_scores_the_written_model_alike(tmp_path):
    """Where the kenlm module is installed, it reads the ARPA file and scores sentences as
    NgramLm does (log10, to KenLM's float32)."""
    kenlm = pytest.importorskip("kenlm")
    corpus = random_corpus(3)
    lm = model_of(tmp_path, corpus, 3, discount_fallback=True)
    reference = kenlm.Model(str(tmp_path / "lm3.arpa"))
    for sentence in corpus[:30] + [["w1", "unseen", "w2"]]:
        mine = lm.score_words(sentence, True) / math.log(10)
        assert mine == pytest.approx(reference.score(" ".join(sentence), bos=True, eos=True), abs=1e-4)
