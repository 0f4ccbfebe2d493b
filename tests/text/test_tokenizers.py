import pickle

import pytest

from asrkit.config import TrainConfig

from asrkit.schema import ConfigError, build
from asrkit.text import (SPACE, BpeTokenizer, CharTokenizer, UnitsError, build_tokenizer, read_units,
                         units_from_symbols, write_units)
from tests.helpers import run_tool


def test_units_roundtrip_and_contract(tmp_path):
    table = write_units(tmp_path / "units.txt", ["b", "a", SPACE, "a", "<unk>"])
    assert table == ["<blank>", "<unk>", "a", "b", SPACE, "<sos/eos>"]
    assert read_units(tmp_path / "units.txt") == table
    lines = (tmp_path / "units.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "<blank> 0" and lines[1] == "<unk> 1" and lines[-1] == "<sos/eos> 5"


@pytest.mark.parametrize("content, match", [
    ("<blank> 0\n<unk> 1\na 3\n<sos/eos> 4\n", "out of order"),
    ("<unk> 0\na 1\n<sos/eos> 2\n", "no <blank> unit"),
    ("<blank> 0\n<unk> 1\na 2\n", "no <sos/eos> unit"),
    ("<blank> 0\n<unk> 1\na 2\na 3\n<sos/eos> 4\n", "duplicate"),
    ("<blank> 0\n<unk>\n", ":2:"),
])
def test_read_units_rejects_broken_tables(tmp_path, content, match):
    (tmp_path / "u.txt").write_text(content, encoding="utf-8")
    with pytest.raises(UnitsError, match=match):
        read_units(tmp_path / "u.txt")


def test_char_tokenizer_english_spaces_and_unknowns():
    tok = CharTokenizer(units_from_symbols("onetwhr" + SPACE))
    ids = tok.encode("  one   two ")
    assert [tok.symbols[i] for i in ids] == ["o", "n", "e", SPACE, "t", "w", "o"]
    assert tok.decode(ids) == "one two"
    assert tok.unk_count == 0
    ids = tok.encode("one zoo")
    assert ids.count(tok.unk_id) == 1 and tok.unk_count == 1  # 'z' is not a unit
    assert tok.decode([tok.blank_id, *tok.encode("two"), tok.eos_id]) == "two"
    assert tok.vocab_size == len(tok.symbols) and tok.sos_id == tok.eos_id == tok.vocab_size - 1


def test_char_tokenizer_is_cjk_aware():
    tok = CharTokenizer(units_from_symbols(["我", "爱", "北", "京", "y", "o", "u", "t", SPACE]))
    syms = tok.text_to_symbols("我 爱 北京 you too 我")
    assert syms == ["我", "爱", "北", "京", "y", "o", "u", SPACE, "t", "o", "o", "我"]
    assert tok.decode(tok.encode("我 爱 北京 you too 我")) == "我爱北京you too我"
    assert tok.unk_count == 0


def test_split_with_space_makes_fields_units():
    tok = CharTokenizer(units_from_symbols(["AH0", "B", "IY1"]), split_with_space=True)
    assert [tok.symbols[i] for i in tok.encode("B  IY1 AH0")] == ["B", "IY1", "AH0"]
    assert tok.decode(tok.encode("B IY1")) == "B IY1"
    assert tok.encode("") == []


def test_make_units_char_and_build_from_config(tmp_path):
    """asrkit's rules, selected explicitly (the default are WeNet's: test_wenet_tokenizers.py)."""
    (tmp_path / "text").write_text("u1 one two\nu2 我 爱 two\nu3\n", encoding="utf-8")
    run_tool("make_units.py", "--rules", "asrkit", tmp_path / "text", tmp_path / "units.txt")
    table = read_units(tmp_path / "units.txt")
    assert table == ["<blank>", "<unk>", "e", "n", "o", "t", "w", SPACE, "我", "爱", "<sos/eos>"]
    cfg = build(TrainConfig, {"tokenizer_conf": {"symbol_table_path": str(tmp_path / "units.txt"), "rules": "asrkit"}})
    tok = build_tokenizer(cfg)
    assert isinstance(tok, CharTokenizer) and tok.decode(tok.encode("我爱 two one")) == "我爱two one"
    # WeNet's rules (the default) keep the spaces touching CJK: the same text, other units
    (tmp_path / "text").write_text("u1 我 爱\n", encoding="utf-8")
    run_tool("make_units.py", tmp_path / "text", tmp_path / "wenet.txt")
    assert read_units(tmp_path / "wenet.txt") == ["<blank>", "<unk>", SPACE, "我", "爱", "<sos/eos>"]


def test_bpe_units_tokenizer_and_pickling(tmp_path, tiny_corpus):
    """asrkit's rules: the case of the text is kept."""
    units, model = tmp_path / "units.txt", tmp_path / "bpe.model"
    text = tiny_corpus.splits["train"].text
    run_tool("make_units.py", "--rules", "asrkit", "--bpe", 30, "--bpe-model", model, text, units)
    table = read_units(units)
    assert table[:2] == ["<blank>", "<unk>"] and table[-1] == "<sos/eos>"
    assert table[2:-1] == sorted(table[2:-1]) and model.is_file()
    cfg = build(TrainConfig, {"tokenizer": "bpe", "tokenizer_conf": {"symbol_table_path": str(units),
                                                                   "bpe_path": str(model), "rules": "asrkit"}})
    tok = build_tokenizer(cfg)
    assert type(tok) is BpeTokenizer
    for line in text.read_text(encoding="utf-8").splitlines()[:20]:
        txt = line.split(maxsplit=1)[1]
        ids = tok.encode(txt)
        assert tok.unk_id not in ids and len(ids) < len(txt)  # pieces are longer than chars
        assert tok.decode(ids) == txt
    clone = pickle.loads(pickle.dumps(tok))  # DataLoader workers get pickled copies
    assert clone.encode("one two oh nine") == tok.encode("one two oh nine")
    tok.encode("one 我")  # a CJK char the units lack is one <unk>
    assert tok.unk_count == 1


def test_bpe_config_errors(tmp_path):
    write_units(tmp_path / "units.txt", ["a"])
    conf = {"symbol_table_path": str(tmp_path / "units.txt")}
    with pytest.raises(ConfigError, match="tokenizer: bpe needs tokenizer_conf.bpe_path"):
        build(TrainConfig, {"tokenizer": "bpe", "tokenizer_conf": conf})
    with pytest.raises(ConfigError, match="split_with_space applies to the char tokenizer only"):
        build(TrainConfig, {"tokenizer": "bpe", "tokenizer_conf": {**conf, "bpe_path": "b.model",
                                                                   "split_with_space": True}})
    with pytest.raises(ValueError, match="symbol_table_path"):
        build_tokenizer(TrainConfig())


def test_special_tokens_declaration_is_checked_against_units(tmp_path):
    write_units(tmp_path / "units.txt", ["a", "b"])  # <sos/eos> is id 4
    conf = {"symbol_table_path": str(tmp_path / "units.txt")}
    ok = {"<blank>": 0, "<unk>": 1, "<sos>": 4, "<eos>": 4}
    assert build_tokenizer(build(TrainConfig, {"tokenizer_conf": {**conf, "special_tokens": ok}})).sos_id == 4
    wenet = {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}
    with pytest.raises(UnitsError, match="says <sos> is id 2, but .*units.txt has 'a' at id 2 \\(<sos/eos> is id 4\\)"):
        build_tokenizer(build(TrainConfig, {"tokenizer_conf": {**conf, "special_tokens": wenet}}))
    with pytest.raises(ValueError, match="unknown token"):
        build_tokenizer(build(TrainConfig, {"tokenizer_conf": {**conf, "special_tokens": {"<pad>": 3}}}))
