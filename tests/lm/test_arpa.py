"""Reading ARPA files: what is refused in one line (truncated, not ARPA, malformed), and the
back-off scorer's states."""
import gzip

import pytest

from asrkit.lm.arpa import ArpaError, build_ngram_lm, format_arpa, load_lm, log10_prob, read_arpa
from asrkit.lm.estimate import estimate

ARPA = """
\\data\\
ngram 1=4
ngram 2=2

\\1-grams:
-1.0\t</s>
-99\t<s>\t-0.5
-0.5\ta\t-0.25
-2.0\t<unk>

\\2-grams:
-0.1\t<s> a
-0.2\ta </s>

\\end\\
"""


def test_back_off_and_states(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text(ARPA, encoding="utf-8")
    lm = load_lm(path)
    assert log10_prob(lm, ["<s>"], "a") == pytest.approx(-0.1)
    assert log10_prob(lm, ["<s>"], "</s>") == pytest.approx(-0.5 - 1.0)  # bow(<s>) · P(</s>)
    assert log10_prob(lm, ["a"], "a") == pytest.approx(-0.25 - 0.5)
    assert log10_prob(lm, ["<s>", "a"], "</s>") == pytest.approx(-0.2)
    assert log10_prob(lm, ["<s>"], "zzz") == pytest.approx(-0.5 - 2.0)  # <unk>
    gz = tmp_path / "lm.arpa.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(ARPA)
    assert read_arpa(gz).ngrams == read_arpa(path).ngrams


def test_written_model_reads_back(tmp_path):
    arpa = estimate([["x", "y"], ["y"], ["x", "x", "y"]], 3, discount_fallback=True)
    (tmp_path / "m.arpa").write_text(format_arpa(arpa), encoding="utf-8")
    again = read_arpa(tmp_path / "m.arpa")
    assert again.counts() == arpa.counts()
    for table, table2 in zip(arpa.ngrams, again.ngrams):
        for g, (p, b) in table.items():
            assert table2[g] == (pytest.approx(p, abs=1e-6), pytest.approx(b, abs=1e-6))


def bad(tmp_path, text, binary=False):
    path = tmp_path / "bad.arpa"
    path.write_bytes(text) if binary else path.write_text(text, encoding="utf-8")
    with pytest.raises(ArpaError) as e:
        read_arpa(path)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


def test_bad_files_are_refused_in_one_line(tmp_path):
    lines = ARPA.strip().splitlines()
    assert "truncated: 1 of the 2 2-grams" in bad(tmp_path, "\n".join(lines[:-3]))
    assert "truncated: no \\end\\" in bad(tmp_path, "\n".join(lines[:-1]))
    assert "truncated: 3 of the 4 1-grams" in bad(tmp_path, "\n".join(lines[:8]))
    assert "not an ARPA file (no \\data\\ header)" in bad(tmp_path, "hello world\nthis is text\n")
    assert "not an ARPA file" in bad(tmp_path, b"mmap lm http://kheafield.com/code\n\x00\xff\xfe\x81" * 20,
                                     binary=True)
    assert "malformed 2-gram line" in bad(tmp_path, ARPA.replace("-0.1\t<s> a", "-0.1\t<s>"))
    assert "must be <= 0" in bad(tmp_path, ARPA.replace("-0.2\ta </s>", "0.5\ta </s>"))
    assert "expected 'ngram 2=COUNT'" in bad(tmp_path, ARPA.replace("ngram 2=2", "ngram two"))
    assert "language model not found" in str(pytest.raises(ArpaError, read_arpa, tmp_path / "absent.arpa").value)


def test_an_ngram_without_its_history_is_refused(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text(ARPA.replace("-0.2\ta </s>", "-0.2\tb </s>"), encoding="utf-8")
    with pytest.raises(ArpaError, match="has no 1-gram 'b'"):
        build_ngram_lm(read_arpa(path))
    path.write_text(ARPA.replace("-0.2\ta </s>", "-0.2\ta b"), encoding="utf-8")
    with pytest.raises(ArpaError, match="the word 'b' of the 2-gram 'a b' is not a 1-gram"):
        build_ngram_lm(read_arpa(path))
