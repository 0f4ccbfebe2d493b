"""tools/lm_split_wer.py: the share of test sentences the LM's text holds, and WER on the
sentences that occur and on those that do not, checked against counts made by hand."""
import json

import pytest

from tools.lm_split_wer import main


def test_split_by_hand(tmp_path, capsys):
    (tmp_path / "lm.txt").write_text("t1 the cat sat\nt2 a dog ran\nt3 The  Cat Sat\n")
    (tmp_path / "ref").write_text("u1 the cat sat\nu2 a dog sat\nu3 a dog ran\nu4 one more word here\n")
    # plain: u1 1 sub (3 words), u2 1 sub (3), u3 0 (3), u4 2 del (4)
    (tmp_path / "plain").write_text("u1 the bat sat\nu2 a cog sat\nu3 a dog ran\nu4 one more\n")
    # lm: u1 0, u2 1 sub, u3 0, u4 1 del
    (tmp_path / "lm").write_text("u1 the cat sat\nu2 a dog ran\nu3 a dog ran\nu4 one more word\n")
    assert main(["--lm_text", str(tmp_path / "lm.txt"), "--ref", str(tmp_path / "ref"), "--hyp",
                 f"plain={tmp_path / 'plain'}", "--hyp", f"lm={tmp_path / 'lm'}", "--json",
                 str(tmp_path / "rows.json")]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "rows.json").read_text())
    assert (result["occur"], result["total"]) == (2, 4)  # u1, u3 (case and spacing as scored)
    plain, lm = result["rows"]
    assert (plain["all"], plain["occur"], plain["unseen"]) == pytest.approx((100 * 4 / 13, 100 / 6, 100 * 3 / 7))
    assert (lm["all"], lm["occur"], lm["unseen"]) == pytest.approx((100 * 2 / 13, 0.0, 100 * 2 / 7))
    assert "2 of 4 test sentences (50.0 %) occur verbatim" in printed
    assert "| lm | 15.38 (-50.0 %) | 0.00 (-100.0 %) | 28.57 (-33.3 %) |" in printed


def test_bad_input_is_one_line(tmp_path, capsys):
    (tmp_path / "ref").write_text("u1 a\n")
    assert main(["--lm_text", str(tmp_path / "missing"), "--ref", str(tmp_path / "ref"), "--hyp", "x=y"]) == 2
    assert main(["--lm_text", str(tmp_path / "ref"), "--ref", str(tmp_path / "ref"), "--hyp", "nolabel"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("lm_split_wer.py: error:") for line in err)
