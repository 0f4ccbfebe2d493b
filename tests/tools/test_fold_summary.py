"""tools/fold_summary.py: per-fold SER/CER on the held-out speaker, mean and worst."""
from __future__ import annotations

from tests.helpers import run_tool
from tools import fold_summary


def write_score(path, kind_lines):
    path.mkdir(parents=True)
    (path / "cer").write_text("".join(f"{line}\n" for line in kind_lines))


def test_folds_mean_and_worst_per_mode(tmp_path):
    for fold, ser, cer in (("fold_a", 10.0, 4.0), ("fold_b", 30.0, 8.0)):
        write_score(tmp_path / fold / "decode_real_test" / "attention_rescoring",
                    [f"%CER {ser / 2} [ 1 / 2 ]", f"%SER {ser} [ 1 / 10 ]"])
        write_score(tmp_path / fold / "decode_real_test_connected" / "attention_rescoring",
                    [f"%CER {cer} [ 1 / 25 ]", "%SER 50.00 [ 1 / 2 ]"])
    write_score(tmp_path / "fold_a" / "decode_real_test" / "ctc_greedy_search", ["%CER 9.0 [ 1 / 2 ]", "%SER 12.0 [ 1 / 2 ]"])
    text = fold_summary.summary([tmp_path / "fold_a", tmp_path / "fold_b"], "real_test", "real_test_connected")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in text.splitlines()[2:]}
    assert rows["attention_rescoring"] == ["10.00", "4.00", "30.00", "8.00", "20.00", "30.00", "6.00", "8.00"]
    # a mode only one fold has: its mean says so, the other cells are '-'
    assert rows["ctc_greedy_search"][:4] == ["12.00", "-", "-", "-"]
    assert rows["ctc_greedy_search"][4] == "12.00 (1 of 2 folds)" and rows["ctc_greedy_search"][6] == "-"
    assert list(rows) == ["ctc_greedy_search", "attention_rescoring"]


def test_no_score_is_exit_1_in_one_line(tmp_path):
    proc = run_tool("fold_summary.py", str(tmp_path / "nothing"), check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
