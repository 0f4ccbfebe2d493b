"""tools/score_decodes.py: a reference the mode has no hypothesis for (recognize skipped it)
is not scored as a deletion but counted apart, in the table and the files."""
from __future__ import annotations

from tests.helpers import run_tool


def test_utterances_without_a_hypothesis_are_counted_apart_not_scored(tmp_path):
    (tmp_path / "ref").write_text("a one two\nb three four\nc five\n", encoding="utf-8")
    (tmp_path / "decode" / "attention").mkdir(parents=True)
    (tmp_path / "decode" / "attention" / "text").write_text("a one two\nb three for\n", encoding="utf-8")
    out = run_tool("score_decodes.py", "--ref", tmp_path / "ref", "--decode_dir", tmp_path / "decode").stdout
    row = next(line for line in out.splitlines() if line.startswith("| attention |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "6.67" and cells[2] == "25.00" and cells[-1] == "1"  # 1 of 15 chars, 1 of 4 words
    cer = (tmp_path / "decode" / "attention" / "cer").read_text(encoding="utf-8")
    assert "utt: c" not in cer and cer.endswith("scored 2 utterances; not scored: 1 without a hypothesis (not decoded)\n")
