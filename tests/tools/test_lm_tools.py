"""tools/train_lm.py (transcripts -> ARPA), tools/biasing_eval.py (phrases a model gets wrong;
recall and false alarms of a decode) and tools/make_hotwords.py (sherpa-onnx's hotwords file)."""
from __future__ import annotations

import json

import pytest
import yaml

from asrkit.lm.arpa import load_lm, log10_prob
from tests.helpers import run_tool, tiny_config_dict
from tools import make_hotwords


def test_train_lm_from_kaldi_text_and_data_list(tmp_path):
    (tmp_path / "text").write_text("u1 a b\nu2 a\n", encoding="utf-8")
    (tmp_path / "data.list").write_text(json.dumps({"key": "u3", "wav": "x", "txt": "b a b"}) + "\n")
    proc = run_tool("train_lm.py", "--order", "2", "--discount_fallback", tmp_path / "text", tmp_path / "data.list",
                    tmp_path / "lm" / "lm.arpa")
    assert "3 sentences, 1-grams 5 2-grams 6" in proc.stdout
    lm = load_lm(tmp_path / "lm" / "lm.arpa")
    assert 10 ** log10_prob(lm, ["<s>"], "a") == pytest.approx(23 / 48, abs=1e-6)  # test_estimate's
    proc = run_tool("train_lm.py", "--order", "2", tmp_path / "text", tmp_path / "x.arpa", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "discount_fallback" in proc.stderr
    assert not (tmp_path / "x.arpa").exists()


def test_biasing_eval_picks_errors_and_scores_recall_and_false_alarms(tmp_path):
    (tmp_path / "ref").write_text("a one two three\nb two two\nc five\n", encoding="utf-8")
    (tmp_path / "hyp").write_text("a one too three\nb two\nc five two\n", encoding="utf-8")
    proc = run_tool("biasing_eval.py", "pick", "--ref", tmp_path / "ref", "--hyp", tmp_path / "hyp", "--top", "5")
    assert proc.stdout.split("\n")[0] == "two"  # wrong twice (substituted, deleted)
    (tmp_path / "phrases").write_text("two\none two\n", encoding="utf-8")
    run_tool("biasing_eval.py", "score", "--ref", tmp_path / "ref", "--hyp", tmp_path / "hyp", "--phrases",
             tmp_path / "phrases", "--json", tmp_path / "out.json")
    result = json.loads((tmp_path / "out.json").read_text())
    two, one_two = result["phrases"]
    assert (two["ref"], two["hyp"], two["recalled"], two["false_alarms"]) == (3, 2, 1, 1)
    assert (one_two["ref"], one_two["recalled"]) == (1, 0)
    assert result["total"] == {"ref": 4, "recalled": 1, "false_alarms": 1, "recall": 25.0}


def test_make_hotwords_spells_phrases_in_the_units(tiny_units, tmp_path, capsys):
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(tiny_config_dict(tokenizer="char",
                                                      tokenizer_conf={"symbol_table_path": str(tiny_units)})))
    (tmp_path / "phrases.txt").write_text("one two\nseven\n", encoding="utf-8")
    assert make_hotwords.main(["--config", str(config), str(tmp_path / "phrases.txt"), str(tmp_path / "hot.txt")]) == 0
    assert (tmp_path / "hot.txt").read_text(encoding="utf-8") == "o n e \u2581 t w o\ns e v e n\n"
    (tmp_path / "bad.txt").write_text("quick\n", encoding="utf-8")
    assert make_hotwords.main(["--config", str(config), str(tmp_path / "bad.txt"), str(tmp_path / "hot2.txt")]) == 2
    assert "the unit 'q' is not one of the model's units" in capsys.readouterr().err
