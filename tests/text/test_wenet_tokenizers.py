"""``tokenizer_conf.rules: wenet`` tokenizes as WeNet's ``CharTokenizer`` and ``BpeTokenizer``
(wenet/text/char_tokenizer.py, bpe_tokenizer.py, tokenize_utils.py, utils/file_utils.py).
Every expected tokenization below is worked out by hand from those rules (the module
docstring of asrkit/text/wenet.py lists them); the BPE model is trained here on four
words, so each of them is one piece (``▁HELLO``) and the pieces are known."""
from __future__ import annotations

import io
import pickle

import pytest
import sentencepiece as spm

from asrkit.config import TrainConfig

from asrkit.schema import ConfigError, build
from asrkit.text import (SPACE, BpeTokenizer, CharTokenizer, NonLangSymsError, WenetBpeTokenizer, WenetCharTokenizer,
                         build_tokenizer, read_non_lang_syms, read_units, units_from_symbols, write_units)
from tests.helpers import run_tool

WORDS = ["HELLO", "WORLD", "OKAY", "GOOD"]
SYMS = ["<NOISE>", "[LAUGHTER]"]
WENET_SPECIAL = {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}


def syms_of(tok, txt):
    return [tok.symbols[i] for i in tok.encode(txt)]


# ----------------------------------------------------------------------------- char


def test_char_keeps_case_and_makes_every_space_a_unit():
    tok = WenetCharTokenizer(units_from_symbols([*"我爱北京Youto", SPACE], "wenet"))
    # only the ends are stripped; a space touching a CJK character is a ▁ too, case kept
    assert tok.text_to_symbols("  我 爱 北京 You too\t") == ["我", SPACE, "爱", SPACE, "北", "京", SPACE,
                                                            "Y", "o", "u", SPACE, "t", "o", "o"]
    assert tok.text_to_symbols("o  u") == ["o", SPACE, SPACE, "u"]  # no whitespace collapsing
    assert syms_of(tok, "o\tu") == ["o", "<unk>", "u"] and tok.unk_count == 1  # a tab is a symbol
    assert tok.decode(tok.encode("我 爱 You")) == "我 爱 You"  # (▁ shown as a space)
    # asrkit's rules, for contrast: spaces touching CJK dropped
    assert CharTokenizer(tok.symbols).text_to_symbols("我 爱 You") == ["我", "爱", "Y", "o", "u"]


def test_char_non_lang_syms_upper_case_and_split_the_text():
    units = units_from_symbols([*"HELODAYBRT你好X{}<>", SPACE, *SYMS], "wenet")
    tok = WenetCharTokenizer(units, SYMS)
    # HELLO <NOISE> | 你好 | [LAUGHTER] | {BREATH} (not listed: its characters) | X; the parts are stripped
    assert tok.text_to_symbols("hello <noise> 你好 [laughter]{breath} x") == [
        "H", "E", "L", "L", "O", "<NOISE>", "你", "好", "[LAUGHTER]", "{", "B", "R", "E", "A", "T", "H", "}", "X"]
    assert tok.text_to_symbols("good day <Noise>") == ["G", "O", "O", "D", SPACE, "D", "A", "Y", "<NOISE>"]
    assert tok.unk_count == 0 and tok.encode("[laughter]") == [units.index("[LAUGHTER]")]
    # a listed symbol with lower-case letters never matches the upper-cased text
    lower = WenetCharTokenizer(units, ["<noise>"])
    assert lower.text_to_symbols("<noise> hello") == [*"<NOISE>", *"HELLO"]
    # a symbols file, even an empty one, turns upper-casing on; no file keeps the case
    assert WenetCharTokenizer(units, []).text_to_symbols("hello") == [*"HELLO"]
    assert WenetCharTokenizer(units).text_to_symbols("hello <noise>") == [*"hello", SPACE, *"<noise>"]


def test_char_split_with_space_splits_at_single_spaces():
    units = units_from_symbols(["AH0", "B", "IY1", "<NOISE>", "C", "D"], "wenet")
    tok = WenetCharTokenizer(units, split_with_space=True)
    assert tok.text_to_symbols(" AH0 B  IY1 ") == ["AH0", "B", "", "IY1"]  # two spaces: an empty field
    assert syms_of(tok, "AH0 B  IY1") == ["AH0", "B", "<unk>", "IY1"]
    assert tok.decode(tok.encode("AH0 B IY1")) == "AH0 B IY1"
    assert tok.text_to_symbols("") == [""]  # (as WeNet: "".split(" ") is [""])
    with_syms = WenetCharTokenizer(units, ["<NOISE>"], split_with_space=True)
    assert with_syms.text_to_symbols("ah0 b <noise> c  d") == ["AH0", "B", "<NOISE>", "C", "", "D"]
    glued = WenetCharTokenizer(units, split_with_space=True, connect_symbol="")  # WeNet's default joiner
    assert glued.decode(glued.encode("AH0 B")) == "AH0B"


def test_non_lang_syms_file(tmp_path):
    path = tmp_path / "syms.txt"
    path.write_text(" <NOISE>\n[LAUGHTER]\n{BREATH}\n", encoding="utf-8")
    assert read_non_lang_syms(path) == ["<NOISE>", "[LAUGHTER]", "{BREATH}"]
    path.write_text("", encoding="utf-8")
    assert read_non_lang_syms(path) == []
    for content, line in [("<NOISE>\nNOISE\n", 2), ("<NOISE>\n\n[X]\n", 2), ("<A<B>>\n", 1)]:
        path.write_text(content, encoding="utf-8")
        with pytest.raises(NonLangSymsError, match=f"^{path}:{line}: .* is not a non-linguistic symbol"):
            read_non_lang_syms(path)
    with pytest.raises(NonLangSymsError, match="not found"):
        read_non_lang_syms(tmp_path / "nope.txt")


# ----------------------------------------------------------------------------- BPE


def train_bpe(path, **options):
    """A sentencepiece BPE model of :data:`WORDS` at ``path``; its pieces (``<unk>`` aside)."""
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter([" ".join(WORDS)] * 20), model_writer=proto,
                                   vocab_size=60, model_type="bpe", hard_vocab_limit=False, character_coverage=1.0,
                                   bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2, **options)
    path.write_bytes(proto.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_unknown(i)]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """A sentencepiece BPE model whose pieces hold each of :data:`WORDS` whole, and a
    WeNet-layout dictionary of its pieces, three CJK characters and :data:`SYMS`; also
    ``raw.model``, the same trained to keep every space (``remove_extra_whitespaces``
    off)."""
    root = tmp_path_factory.mktemp("wenet_bpe")
    pieces = train_bpe(root / "bpe.model")
    assert {"▁" + w for w in WORDS} <= set(pieces)
    assert train_bpe(root / "raw.model", remove_extra_whitespaces=False) == pieces
    write_units(root / "units.txt", [*pieces, "你", "好", "的", *SYMS], "wenet")
    (root / "syms.txt").write_text("\n".join(SYMS) + "\n", encoding="utf-8")
    return root


def test_bpe_upper_cases_and_splits_at_cjk(bpe):
    tok = WenetBpeTokenizer(read_units(bpe / "units.txt"), bpe / "bpe.model")
    expected = ["你", "好", "▁HELLO", "▁WORLD", "的"]
    for txt in ["你好 hello world 的", "你好 HELLO WORLD 的", " 你好Hello   World的 "]:
        assert tok.text_to_symbols(txt) == expected, txt
    assert tok.unk_count == 0 and syms_of(tok, "x") == ["▁", "<unk>"]  # the model has no X
    assert tok.decode(tok.encode("你好 hello world 的")) == "你好 HELLO WORLD的"  # each ▁ a space, ends stripped
    # only U+4E00..U+9FFF are units: a kana is text for the model (an unknown piece: <unk>)
    assert tok.text_to_symbols("okayの") == ["▁OKAY", "の"] and syms_of(tok, "okayの") == ["▁OKAY", "<unk>"]
    assert BpeTokenizer(tok.symbols, bpe / "bpe.model").text_to_symbols("OKAYの") == ["▁OKAY", "の"]  # asrkit: a unit
    assert BpeTokenizer(tok.symbols, bpe / "bpe.model").text_to_symbols("OKAY の") == ["▁OKAY", "の"]
    assert tok.text_to_symbols("OKAY の") == ["▁OKAY", "▁", "の"]  # WeNet: "▁の" encoded
    # each run goes to the model as it is, its spaces included (they count when the model keeps them)
    raw = WenetBpeTokenizer(tok.symbols, bpe / "raw.model")
    assert raw.text_to_symbols("你好 hello world 的") == ["你", "好", "▁", "▁HELLO", "▁WORLD", "▁", "的"]
    # asrkit's rules keep the case: lower-case letters are not in this model
    assert tok.unk_id in BpeTokenizer(tok.symbols, bpe / "bpe.model").encode("hello")


def test_bpe_non_lang_syms(bpe):
    units = read_units(bpe / "units.txt")
    tok = WenetBpeTokenizer(units, bpe / "bpe.model", SYMS)
    # HELLO | <NOISE> | WORLD | [LAUGHTER]: each run is encoded alone (its own ▁)
    assert tok.text_to_symbols("hello<noise>world [laughter] good") == ["▁HELLO", "<NOISE>", "▁WORLD", "[LAUGHTER]",
                                                                        "▁GOOD"]
    assert tok.decode(tok.encode("hello <noise> okay")) == "HELLO<NOISE> OKAY"
    # not listed: {BREATH} is text for the model; without the file <noise> is too (its case kept)
    sp = spm.SentencePieceProcessor(model_file=str(bpe / "bpe.model"))
    assert tok.text_to_symbols("{breath} okay") == sp.encode("{BREATH} OKAY", out_type=str)
    assert "{BREATH}" not in sp.encode("{BREATH} OKAY", out_type=str)
    plain = WenetBpeTokenizer(units, bpe / "bpe.model")
    assert plain.text_to_symbols("hello <noise>") == sp.encode("HELLO <NOISE>", out_type=str)
    assert plain.text_to_symbols("hello <noise>")[0] == "▁HELLO" and plain.unk_id in plain.encode("hello <noise>")


def test_bpe_unknown_pieces_and_pickling(bpe):
    units = [u if u != "▁WORLD" else "WORLD_" for u in read_units(bpe / "units.txt")]  # a dictionary without ▁WORLD
    tok = WenetBpeTokenizer(units, bpe / "bpe.model")
    assert syms_of(tok, "hello world") == ["▁HELLO", "<unk>"] and tok.unk_count == 1
    clone = pickle.loads(pickle.dumps(tok))  # DataLoader workers get pickled copies
    assert clone.encode("good 你 okay") == tok.encode("good 你 okay")


# ----------------------------------------------------------------------------- configs


def wenet_conf(bpe, **conf):
    return {"tokenizer": "bpe", "tokenizer_conf": {
        "symbol_table_path": str(bpe / "units.txt"), "bpe_path": str(bpe / "bpe.model"), "non_lang_syms_path": None,
        "split_with_space": False, "is_multilingual": False, "num_languages": 1, "special_tokens": WENET_SPECIAL,
        **conf}}


def test_a_wenet_config_builds_wenets_tokenizers(bpe):
    tok = build_tokenizer(build(TrainConfig, wenet_conf(bpe)))
    assert isinstance(tok, WenetBpeTokenizer) and tok.non_lang_syms is None and tok.sos_id == 2
    tok = build_tokenizer(build(TrainConfig, wenet_conf(bpe, non_lang_syms_path=str(bpe / "syms.txt"))))
    assert tok.text_to_symbols("hello <noise>") == ["▁HELLO", "<NOISE>"]
    char = {"tokenizer": "char", "tokenizer_conf": {"symbol_table_path": str(bpe / "units.txt"),
                                                    "non_lang_syms_path": str(bpe / "syms.txt"), "connect_symbol": "_"}}
    tok = build_tokenizer(build(TrainConfig, char))
    assert isinstance(tok, WenetCharTokenizer) and tok.non_lang_syms == SYMS
    assert tok.decode(tok.encode("你<noise>好")) == "你_<NOISE>_好"
    char["tokenizer_conf"].pop("connect_symbol")
    asrkit = build(TrainConfig, {**char, "tokenizer_conf": {**char["tokenizer_conf"], "non_lang_syms_path": None,
                                                            "rules": "asrkit"}})
    assert type(build_tokenizer(asrkit)) is CharTokenizer
    with pytest.raises(NonLangSymsError, match="nope.txt"):
        build_tokenizer(build(TrainConfig, wenet_conf(bpe, non_lang_syms_path=str(bpe / "nope.txt"))))


@pytest.mark.parametrize("conf, message", [
    ({"connect_symbol": " "}, "connect_symbol applies to the char tokenizer with rules: wenet only"),
    ({"rules": "asrkit", "non_lang_syms_path": "syms.txt"}, "non_lang_syms_path follows WeNet's rules"),
    ({"rules": "espnet"}, "tokenizer_conf.rules"),
    ({"is_multilingual": True}, "is_multilingual / num_languages apply to tokenizer: whisper only"),
])
def test_config_refuses_what_does_not_apply(bpe, conf, message):
    with pytest.raises(ConfigError, match=message):
        build(TrainConfig, wenet_conf(bpe, **conf))


def test_make_units_for_wenet_rules_with_non_lang_syms(bpe, tmp_path):
    """The units are what WeNet's tokenizers make of the text: the listed symbols, upper-cased
    letters, and for BPE a model of the upper-cased runs between symbols and CJK characters."""
    (tmp_path / "text").write_text("u1 hello <noise> 你好\nu2 good  [laughter] {breath}\n", encoding="utf-8")
    syms = tmp_path / "syms.txt"
    syms.write_text("<NOISE>\n[LAUGHTER]\n<SIL>\n", encoding="utf-8")
    run_tool("make_units.py", "--non-lang-syms", syms, "--layout", "wenet", tmp_path / "text", tmp_path / "char.txt")
    # (no ▁: every space touches a symbol, and the parts are stripped; {BREATH} is not listed; every
    # listed symbol is a unit, <SIL> too)
    assert read_units(tmp_path / "char.txt") == ["<blank>", "<unk>", "<sos/eos>", "<NOISE>", "<SIL>", *"ABDEGHLORT",
                                                 "[LAUGHTER]", "{", "}", "你", "好"]
    model = tmp_path / "bpe.model"
    run_tool("make_units.py", "--non-lang-syms", syms, "--bpe", 20, "--bpe-model", model, tmp_path / "text",
             tmp_path / "bpe.txt")
    table = read_units(tmp_path / "bpe.txt")
    assert {"<NOISE>", "[LAUGHTER]", "<SIL>", "你", "好"} <= set(table) and not any(u.islower() for u in table[2:-1])
    tok = WenetBpeTokenizer(table, model, SYMS)
    assert tok.unk_id not in tok.encode("hello <noise> 你好 good [laughter] {breath}")
    refused = run_tool("make_units.py", "--non-lang-syms", tmp_path / "text", tmp_path / "text", tmp_path / "x.txt",
                       check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "is not a non-linguistic symbol" in refused.stderr
