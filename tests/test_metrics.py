import math
import subprocess
import sys
from pathlib import Path

import pytest

from asrkit.metrics import Normalizer, align, error_rate, read_text, score, tokenize

REPO = Path(__file__).resolve().parents[1]


def counts(ref: str, hyp: str, **kw):
    a = align(tokenize(ref, **kw), tokenize(hyp, **kw))
    return a.sub, a.dels, a.ins, a.ref_len


def test_hand_worked_word_cases():
    assert counts("a b c d", "a b c d") == (0, 0, 0, 4)
    assert counts("a b c d", "a x c d") == (1, 0, 0, 4)
    assert counts("a b c d", "a c d") == (0, 1, 0, 4)
    assert counts("a b c d", "a b y c d") == (0, 0, 1, 4)
    assert counts("a b c d", "b c d e f") == (0, 1, 2, 4)
    assert counts("the cat sat", "a cat sat down") == (1, 0, 1, 3)
    assert counts("one two three", "") == (0, 3, 0, 3)
    assert counts("", "one two") == (0, 0, 2, 0)
    assert counts("", "") == (0, 0, 0, 0)


def test_alignment_pairs_show_the_edits():
    a = align("a b c d".split(), "a x c d e".split())
    assert a.pairs == [("a", "a"), ("b", "x"), ("c", "c"), ("d", "d"), (None, "e")]
    assert (a.sub, a.dels, a.ins, a.correct) == (1, 0, 1, 3)


def test_error_rate_edge_cases():
    assert error_rate(0, 0) == 0.0
    assert math.isinf(error_rate(2, 0))
    assert error_rate(1, 4) == 0.25


def test_cer_excludes_spaces_unless_asked():
    assert tokenize("ab cd", "char") == ["a", "b", "c", "d"]
    assert tokenize("ab  cd", "char", keep_spaces=True) == ["a", "b", " ", "c", "d"]
    # "ab cd" -> "abc d": no error without spaces; with spaces two edits (ties go to substitutions)
    assert counts("ab cd", "abc d", mode="char") == (0, 0, 0, 4)
    assert counts("ab cd", "abc d", mode="char", keep_spaces=True) == (2, 0, 0, 5)


def test_cjk_characters_are_words():
    assert tokenize("我们去 hello world") == ["我", "们", "去", "hello", "world"]
    assert counts("我们去北京", "我们在北京") == (1, 0, 0, 5)


def test_normalisation_options():
    norm = Normalizer(ignore_case=True, remove_punct=True)
    assert tokenize(norm("Hello, World!")) == ["hello", "world"]
    assert tokenize(Normalizer()("Hello, World!")) == ["Hello,", "World!"]
    assert tokenize(Normalizer()("▁one▁two")) == ["one", "two"]


def test_corpus_totals_and_kaldi_summary():
    refs = {"u1": "a b c d", "u2": "e f", "u3": "g"}
    hyps = {"u1": "a x c d e", "u2": "e f"}
    totals, details = score(refs, hyps)
    assert (totals.sub, totals.dels, totals.ins, totals.ref_len) == (1, 1, 1, 7)
    assert totals.summary() == "%WER 42.86 [ 3 / 7, 1 ins, 1 del, 1 sub ]"
    assert totals.sentence_summary() == "%SER 66.67 [ 2 / 3 ]"
    assert [k for k, _ in details] == ["u1", "u2", "u3"]
    with pytest.raises(ValueError, match="not in the reference"):
        score(refs, {"zz": "a"})


def test_read_text_rejects_duplicates_and_allows_empty_transcripts():
    assert read_text(["u1 a b", "u2", ""]) == {"u1": "a b", "u2": ""}
    with pytest.raises(ValueError, match="duplicate key"):
        read_text(["u1 a", "u1 b"])


def test_compute_wer_tool(tmp_path):
    ref = tmp_path / "ref"
    hyp = tmp_path / "hyp"
    ref.write_text("u1 one two three\nu2 four five\n", encoding="utf-8")
    hyp.write_text("u1 one too three\nu2 four five six\n", encoding="utf-8")
    tool = [sys.executable, str(REPO / "tools" / "compute_wer.py")]
    out = subprocess.run(tool + [str(ref), str(hyp)], capture_output=True, text=True, check=True).stdout
    assert "utt: u1" in out and "ops:" in out
    assert out.strip().splitlines()[-2] == "%WER 40.00 [ 2 / 5, 1 ins, 0 del, 1 sub ]"
    out = subprocess.run(tool + ["--mode", "char", "--summary-only", str(ref), str(hyp)],
                         capture_output=True, text=True, check=True).stdout
    # chars: "onetwothree"+"fourfive" = 19; two->too 1 sub; +"six" 3 ins
    assert out.splitlines()[0] == "%CER 21.05 [ 4 / 19, 3 ins, 0 del, 1 sub ]"
    bad = subprocess.run(tool + [str(ref), str(tmp_path / "missing")], capture_output=True, text=True)
    assert bad.returncode == 1 and "error" in bad.stderr
