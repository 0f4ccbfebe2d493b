"""The context graph (asrkit.decode.context_graph): Aho-Corasick matching of overlapping
phrases with WeNet's scores (a bonus per matched unit, taken back when the path leaves a
phrase), and the phrase list's refusals."""
import time

import pytest

from asrkit.decode.context_graph import (ContextListError, build_context_graph, read_phrase_list,
                                         tokenize_phrases)
from asrkit.text.asrkit_rules import CharTokenizer

PHRASES = ["S", "HE", "SHE", "SHELL", "HIS", "HERS", "HELLO", "THIS", "THEM"]


def graph(phrases=PHRASES, score=1.0, strict=True):
    return build_context_graph([[ord(c) for c in p] for p in phrases], score, 128, strict)


def run(g, text: str) -> tuple[float, list[float]]:
    """Total score of ``text`` after finalize, and the score of each step."""
    state, steps = 0, []
    for ch in text:
        score, state = g.step(state, ord(ch))
        steps.append(score)
    return sum(steps) + g.finalize(state), steps


@pytest.mark.parametrize("text, total", [
    ("HEHERSHE", 14), ("HERSHE", 12), ("HISHE", 9), ("SHED", 6), ("SHELF", 6), ("HELL", 2), ("HELLO", 7),
    ("DHRHISQ", 4), ("THEN", 2)])
def test_overlapping_phrases_score_as_icefall_and_sherpa_onnx(text, total):
    """The published checks of this automaton (icefall's and sherpa-onnx's context-graph
    tests, score 1 per unit): every phrase occurrence keeps len(phrase), overlapping ones
    included ("HISHE": HIS, S, SHE, HE = 3 + 1 + 3 + 2)."""
    assert run(graph(), text)[0] == total


@pytest.mark.parametrize("text, total", [
    ("HEHERSHE", 7), ("HERSHE", 5), ("HISHE", 5), ("SHED", 3), ("SHELF", 3), ("HELL", 2), ("HELLO", 2),
    ("DHRHISQ", 3), ("THEN", 2)])
def test_non_strict_matching_scores_as_sherpa_onnx(text, total):
    """sherpa-onnx's non-strict mode (its hotwords in modified_beam_search; its test
    TestBasicNonStrict): back to the root after each completed phrase ("HELLO": HE, then
    LLO matches nothing)."""
    assert run(graph(strict=False), text)[0] == total


def test_the_bonus_is_taken_back_when_the_path_leaves_a_phrase():
    g = graph(["ABCD"], score=2.0)
    total, steps = run(g, "ABCX")
    assert steps == [2.0, 2.0, 2.0, -6.0] and total == 0.0  # X leaves the phrase: 3 units' bonus back
    total, steps = run(g, "ABC")  # the utterance ends inside the phrase: finalize takes it back
    assert steps == [2.0, 2.0, 2.0] and total == 0.0
    total, steps = run(g, "ABCD")  # completed: the partial bonus, then the phrase's own 4·2 for good
    assert steps == [2.0, 2.0, 2.0, 2.0 + 8.0] and total == 8.0
    # "SHELF" (the table of sherpa-onnx's hotwords page): S is a phrase (1 + 1), SHE ends SHE
    # and HE (1 + 3 + 2), L continues towards SHELL (1), F leaves it: SHEL's 4 taken back
    total, steps = run(graph(), "SHELF")
    assert steps == [1.0 + 1.0, 1.0, 1.0 + 5.0, 1.0, -4.0] and total == 6.0


def test_ten_thousand_phrases_build_within_two_seconds():
    phrases = [[(i * 7 + j * 13) % 50 + 2 for j in range(3 + i % 12)] for i in range(10_000)]
    start = time.perf_counter()
    g = build_context_graph(phrases, 1.5, 64)
    assert time.perf_counter() - start < 2.0
    state = 0
    for unit in phrases[123]:
        state = g.step(state, unit)[1]
    assert g.depth[state] == len(phrases[123])


def test_phrase_list_refusals(tmp_path):
    tokenizer = CharTokenizer(["<blank>", "<unk>", "a", "b", "\u2581", "<sos/eos>"])
    assert tokenize_phrases(["ab", "b a"], tokenizer) == [[2, 3], [3, 4, 2]]
    with pytest.raises(ContextListError, match=r"phrase 2 'ac': the unit 'c' is not one of the model's units"):
        tokenize_phrases(["ab", "ac"], tokenizer)
    (tmp_path / "empty.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ContextListError, match="the context list is empty"):
        read_phrase_list(tmp_path / "empty.txt")
    with pytest.raises(ContextListError, match="context list not found"):
        read_phrase_list(tmp_path / "absent.txt")
    (tmp_path / "list.txt").write_text("one  two\n\nthree\n", encoding="utf-8")
    assert read_phrase_list(tmp_path / "list.txt") == ("one two", "three")
