"""Dictionaries in both layouts: asrkit's (``<sos/eos>`` last) and WeNet's current one
(``<blank> 0``, ``<unk> 1``, ``<sos/eos> 2``, then the units; the fixture is the
``units.txt`` WeNet wrote for tests/fixtures/wenet's reference models).  The special ids come
from where the symbols are; ``tokenizer_conf.special_tokens`` and ``ctc_conf.ctc_blank_id``
are checked against the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from asrkit.config_files import load_text_inputs
from asrkit.config import TrainConfig
from asrkit.schema import build
from asrkit.text import SPACE, UnitsError, Vocabulary, build_tokenizer, read_units, units_from_symbols, write_units
from tests.helpers import run_tool

WENET_UNITS = Path(__file__).resolve().parents[1] / "fixtures" / "wenet" / "offline" / "units.txt"
WENET_SPECIAL = {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}  # as WeNet's configs declare it


def config(units, **top):
    return build(TrainConfig, {"tokenizer_conf": {"symbol_table_path": str(units)}, **top})


def test_wenet_dictionary_loads_with_its_special_ids():
    table = read_units(WENET_UNITS)
    assert table[:3] == ["<blank>", "<unk>", "<sos/eos>"] and table[-1] == SPACE and len(table) == 19
    tok = build_tokenizer(config(WENET_UNITS, tokenizer_conf={"symbol_table_path": str(WENET_UNITS),
                                                               "special_tokens": WENET_SPECIAL}))
    v = tok.vocabulary
    assert (v.blank_id, v.unk_id, v.sos_id, v.eos_id, v.size) == (0, 1, 2, 2, 19)
    assert (tok.blank_id, tok.unk_id, tok.sos_id, tok.eos_id) == (0, 1, 2, 2)
    ids = tok.encode("one two")
    assert min(ids) >= 3 and 18 in ids  # units only; the last id is a unit (▁), not <sos/eos>
    assert tok.decode([2, 0, *ids, 2]) == "one two"  # <sos/eos> (2) and <blank> dropped
    assert tok.decode([18, 9]) == "o"  # ... and the last id kept: ▁ is a space (stripped at the ends)


def test_asrkit_dictionary_loads_with_sos_eos_last(tmp_path):
    write_units(tmp_path / "units.txt", ["a", "b"])
    tok = build_tokenizer(config(tmp_path / "units.txt"))
    assert (tok.blank_id, tok.unk_id, tok.sos_id, tok.eos_id, tok.vocab_size) == (0, 1, 4, 4, 5)
    assert tok.decode([4, 2, 3, 4]) == "ab" and tok.decode([2]) == "a"


def test_write_units_and_make_units_in_both_layouts(tmp_path):
    assert units_from_symbols("ba", "wenet") == ["<blank>", "<unk>", "<sos/eos>", "a", "b"]
    assert units_from_symbols("ba") == ["<blank>", "<unk>", "a", "b", "<sos/eos>"]
    with pytest.raises(ValueError, match="unknown units layout"):
        units_from_symbols("a", "kaldi")
    (tmp_path / "text").write_text("u1 one two\nu2 three\n", encoding="utf-8")
    run_tool("make_units.py", "--layout", "wenet", tmp_path / "text", tmp_path / "wenet.txt")
    run_tool("make_units.py", tmp_path / "text", tmp_path / "asrkit.txt")
    wenet, asrkit = read_units(tmp_path / "wenet.txt"), read_units(tmp_path / "asrkit.txt")
    assert wenet[:3] == ["<blank>", "<unk>", "<sos/eos>"] and asrkit[-1] == "<sos/eos>"
    assert wenet[3:] == asrkit[2:-1] == sorted("onetwhr") + [SPACE]
    lines = (tmp_path / "wenet.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["<blank> 0", "<unk> 1", "<sos/eos> 2"]
    # the char units of the WeNet reference corpus, in WeNet's layout, are WeNet's own file
    (tmp_path / "digits").write_text("u1 " + " ".join(["one", "two", "three", "four", "five", "six", "seven",
                                                        "eight", "nine", "zero", "oh"]) + "\n", encoding="utf-8")
    run_tool("make_units.py", "--layout", "wenet", tmp_path / "digits", tmp_path / "digits.txt")
    assert (tmp_path / "digits.txt").read_bytes() == WENET_UNITS.read_bytes()


def test_special_tokens_disagreeing_with_the_file_is_one_line_naming_both(tmp_path):
    write_units(tmp_path / "units.txt", ["a", "b"])  # asrkit layout: <sos/eos> is id 4, 'a' id 2
    declared = {"tokenizer_conf": {"symbol_table_path": str(tmp_path / "units.txt"), "special_tokens": WENET_SPECIAL}}
    with pytest.raises(UnitsError) as e:
        build_tokenizer(build(TrainConfig, declared))
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "units.txt") in msg
    assert "special_tokens says <sos> is id 2" in msg and "has 'a' at id 2 (<sos/eos> is id 4)" in msg
    for special, expected in [({"<blank>": 1}, "has '<unk>' at id 1 (<blank> is id 0)"),
                              ({"<eos>": 7}, "<eos>: 7 is not an id of"), ({"<pad>": 3}, "unknown token(s) ['<pad>']")]:
        declared["tokenizer_conf"]["special_tokens"] = special
        with pytest.raises(UnitsError, match="^[^\n]*" + expected.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            build_tokenizer(build(TrainConfig, declared))
    # the asrkit declaration of the same file passes, and so does WeNet's for WeNet's file
    declared["tokenizer_conf"]["special_tokens"] = {"<blank>": 0, "<unk>": 1, "<sos>": 4, "<eos>": 4}
    assert build_tokenizer(build(TrainConfig, declared)).sos_id == 4


def test_blank_anywhere_needs_ctc_blank_id_to_match(tmp_path):
    units = tmp_path / "units.txt"
    units.write_text("<unk> 0\n<blank> 1\na 2\n<sos/eos> 3\n", encoding="utf-8")
    assert Vocabulary.from_symbols(read_units(units)).blank_id == 1
    with pytest.raises(UnitsError, match=f"ctc_conf.ctc_blank_id is 0 but {units} has <blank> at id 1: "
                                         "set ctc_conf.ctc_blank_id: 1$"):
        load_text_inputs(config(units), model_cmvn=False)
    tok = load_text_inputs(config(units, ctc_conf={"ctc_blank_id": 1}), model_cmvn=False)
    assert (tok.blank_id, tok.unk_id, tok.eos_id) == (1, 0, 3) and tok.decode([1, 2, 3, 0]) == "a<unk>"
    # a model without a CTC head has no blank to agree on
    assert load_text_inputs(config(units, model_conf={"ctc_weight": 0.0}), model_cmvn=False).blank_id == 1
    with pytest.raises(Exception, match="ctc_blank_id: must be >= 0"):
        config(units, ctc_conf={"ctc_blank_id": -1})


def test_unit_symbols_are_compared_after_nfc(tmp_path):
    units = tmp_path / "units.txt"  # 'é' composed and decomposed: one unit written twice
    units.write_text("<blank> 0\n<unk> 1\n\u00e9 2\ne\u0301 3\n<sos/eos> 4\n", encoding="utf-8")
    with pytest.raises(UnitsError, match=":4: duplicate symbol 'é' \\(already id 2\\)"):
        read_units(units)
