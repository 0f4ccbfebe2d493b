"""asrkit.bin.recognize: train.yaml + checkpoint + data.list -> one text file per mode."""
import json
import logging
import subprocess
import sys

import pytest
import torch
import yaml

from asrkit.bin.recognize import main
from asrkit.config import load_config
from asrkit.data.lists import read_list
from asrkit.data.processors import build_sample_processor
from asrkit.decode import DecodingOptions, decode
from asrkit.metrics import read_text as read_kaldi_text, score
from asrkit.models import AsrModel, build_model
from asrkit.text import build_tokenizer, write_units
from tests.helpers import REPO
from asrkit.text.vocabulary import Vocabulary

MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")  # a CTC/attention model's

TINY_MODEL = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 1,
                     "cnn_module_kernel": 5, "dropout_rate": 0.0, "positional_dropout_rate": 0.0},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1, "dropout_rate": 0.0,
                     "positional_dropout_rate": 0.0},
    "model_conf": {"ctc_weight": 0.3},
}


@pytest.fixture(scope="module")
def experiment(tiny_corpus, tmp_path_factory):
    """A resolved train.yaml, a units file and a checkpoint of a random tiny model whose
    outputs are biased so every mode emits a few tokens."""
    root = tmp_path_factory.mktemp("exp")
    texts = [e.txt for e in read_list(tiny_corpus.splits["test"].data_list)]
    units = write_units(root / "units.txt", {c for t in texts for c in t.replace(" ", "▁")})
    cmvn = root / "global_cmvn"
    cmvn.write_text('{"mean_stat": [%s], "var_stat": [%s], "frame_num": 1}' % (
        ", ".join(["10.0"] * 40), ", ".join(["101.0"] * 40)))
    config = dict(TINY_MODEL, tokenizer="char",
                  tokenizer_conf={"symbol_table_path": str(root / "units.txt")},
                  dataset_conf={"fbank_conf": {"num_mel_bins": 40}},
                  cmvn="global_cmvn", cmvn_conf={"cmvn_file": str(cmvn)},
                  input_dim=40, output_dim=len(units))
    (root / "train.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    cfg = load_config(root / "train.yaml")
    torch.manual_seed(0)
    model = build_model(cfg, 40, Vocabulary.from_symbols(units))
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] += 0.3  # short, non-empty attention hypotheses
        model.ctc.ctc_lo.bias[0] += 1.0
    torch.save({"model": model.state_dict(), "step": 7}, root / "ckpt.pt")
    torch.save(model.state_dict(), root / "bare.pt")
    return root, cfg, model.eval()


def run_recognize(*args):
    return subprocess.run([sys.executable, "-m", "asrkit.bin.recognize", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO)


def read_text(path):
    return [line.rstrip("\n").split(" ", 1) for line in open(path, encoding="utf-8")]


def test_recognize_writes_one_text_per_mode_matching_direct_decoding(experiment, tiny_corpus):
    root, cfg, model = experiment
    data = tiny_corpus.splits["test"].data_list
    out = root / "decode"
    proc = run_recognize("--config", root / "train.yaml", "--checkpoint", root / "ckpt.pt", "--data", data,
                         "--result_dir", out, "--modes", *MODES, "--beam_size", 3, "--batch_size", 5,
                         "--score", "char")
    assert proc.returncode == 0, proc.stderr
    assert "RTF" in proc.stdout and "RTF" in proc.stderr
    entries = read_list(data)
    tokenizer = build_tokenizer(cfg)
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False)
    expected = {m: [] for m in MODES}
    for entry in entries:  # one utterance at a time, no batching
        batch = processor.collate([processor(entry, 0)])
        hyps = decode(model, batch["feats"], batch["feats_lengths"], DecodingOptions(modes=MODES, beam_size=3))
        for mode in MODES:
            expected[mode].append(tokenizer.decode(hyps[mode][0]))
    for mode in MODES:
        lines = read_text(out / mode / "text")
        assert [line[0] for line in lines] == [e.key for e in entries]  # data.list order
        assert [line[1] if len(line) > 1 else "" for line in lines] == expected[mode], mode
        assert "%CER" in (out / mode / "wer").read_text(encoding="utf-8")
    assert any(any(t for t in expected[m]) for m in MODES)


def test_recognize_accepts_a_bare_state_dict_and_reports_clear_errors(experiment, tiny_corpus, tmp_path,
                                                                      caplog):
    root, _, _ = experiment
    data = tiny_corpus.splits["dev"].data_list
    common = ["--config", str(root / "train.yaml"), "--data", str(data)]
    assert main(common + ["--checkpoint", str(root / "bare.pt"), "--result_dir", str(tmp_path / "d"),
                          "--modes", "ctc_greedy_search"]) == 0
    assert len(read_text(tmp_path / "d" / "ctc_greedy_search" / "text")) == len(read_list(data))
    assert main(common + ["--checkpoint", str(tmp_path / "nope.pt"), "--result_dir", str(tmp_path / "e")]) == 2
    assert "checkpoint not found" in caplog.text
    assert main(common + ["--checkpoint", str(root / "ckpt.pt"), "--result_dir", str(tmp_path / "f"),
                          "--override", "encoder_conf.num_blocks=2"]) == 2
    assert "does not match" in caplog.text


def test_recognize_refuses_a_mode_the_model_cannot_run_with_exit_2(experiment, tiny_corpus, tmp_path, caplog):
    """A CTC-only model (ctc_weight 1: no decoder) asked for attention: one line, exit 2,
    nothing written."""
    root, _, _ = experiment
    config = yaml.safe_load((root / "train.yaml").read_text(encoding="utf-8"))
    config["model_conf"] = {"ctc_weight": 1.0}
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    cfg = load_config(tmp_path / "train.yaml")
    model = build_model(cfg, 40, build_tokenizer(cfg).vocabulary)
    assert model.decoder is None
    torch.save(model.state_dict(), tmp_path / "ctc_only.pt")
    code = main(["--config", str(tmp_path / "train.yaml"), "--checkpoint", str(tmp_path / "ctc_only.pt"),
                 "--data", str(tiny_corpus.splits["dev"].data_list), "--result_dir", str(tmp_path / "d"),
                 "--modes", "ctc_greedy_search", "attention"])
    assert code == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["mode attention needs an attention decoder; this model has none (trained with ctc_weight 1)"]
    assert not (tmp_path / "d").exists()


def test_recognize_decodes_a_wenet_shard_list_as_its_raw_list(experiment, tiny_corpus, tmp_path):
    """The dev set as WeNet shards (plain tar paths): the same transcripts in every mode as
    from its raw list; the index cache lands next to the list."""
    from tests.data.audio_helpers import list_rows, write_wenet_shards
    root, _, _ = experiment
    raw = tiny_corpus.splits["dev"].data_list
    lst = write_wenet_shards(list_rows(raw), tmp_path / "shards", tmp_path / "data.list", per_tar=5)
    modes = ["ctc_greedy_search", "attention_rescoring"]
    for name, data in (("raw", raw), ("wenet", lst)):
        assert main(["--config", str(root / "train.yaml"), "--checkpoint", str(root / "ckpt.pt"), "--data", str(data),
                     "--result_dir", str(tmp_path / name), "--modes", *modes, "--beam_size", "3"]) == 0
    for mode in modes:
        texts = read_text(tmp_path / "wenet" / mode / "text")
        assert len(texts) == 12 and texts == read_text(tmp_path / "raw" / mode / "text")
    assert (tmp_path / "data.list.index.json").is_file()


@pytest.mark.parametrize("options, message", [
    (["--simulate_streaming"], "simulate_streaming needs decoding_chunk_size > 0, got -1"),
    (["--decoding_chunk_size", "-2"], "decoding_chunk_size must be -1 or 0 (full context) or > 0"),
    (["--decoding_chunk_size", "4", "--num_decoding_left_chunks", "-3"], "num_decoding_left_chunks must be -1"),
    (["--length_penalty", "-1"], "length_penalty must be >= 0, got -1.0"),
    (["--blank_penalty", "-0.5"], "blank_penalty must be >= 0, got -0.5"),
    (["--batch_size", "0"], "batch_size must be >= 1, got 0"),
    (["--beam_size", "0"], "beam_size must be >= 1, got 0"),
    (["--ctc_weight", "-5"], "ctc_weight must be in [0, 1], got -5.0"),
    (["--reverse_weight", "1.5"], "reverse_weight must be in [0, 1], got 1.5"),
])
def test_bad_decoding_options_exit_2_in_one_line_before_anything_loads(options, message, tmp_path, caplog):
    code = main(["--config", str(tmp_path / "absent.yaml"), "--checkpoint", str(tmp_path / "absent.pt"),
                 "--data", str(tmp_path / "absent.list"), "--result_dir", str(tmp_path / "d"), *options])
    assert code == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and message in errors[0], errors  # (not "config not found": checked first)
    assert not (tmp_path / "d").exists()


def test_recognize_hands_penalties_and_chunking_to_decoding(experiment, tiny_corpus, tmp_path, monkeypatch):
    """--length_penalty / --blank_penalty give decode()'s hypotheses with those options;
    --decoding_chunk_size reaches the model's masked forward, --simulate_streaming the
    encoder's chunk-by-chunk forward (stand-ins recording their arguments, returning the
    full-context output)."""
    root, cfg, model = experiment
    data = tiny_corpus.splits["dev"].data_list
    entries = read_list(data)
    modes = ["ctc_greedy_search", "attention", "attention_rescoring"]
    common = ["--config", str(root / "train.yaml"), "--checkpoint", str(root / "ckpt.pt"), "--data", str(data),
              "--modes", *modes, "--beam_size", "3"]
    assert main(common + ["--result_dir", str(tmp_path / "pen"), "--length_penalty", "1.5",
                          "--blank_penalty", "1.0"]) == 0
    tokenizer = build_tokenizer(cfg)
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False)
    expected = {mode: [] for mode in modes}
    options = DecodingOptions(modes=modes, beam_size=3, length_penalty=1.5, blank_penalty=1.0)
    for entry in entries:  # one utterance at a time
        batch = processor.collate([processor(entry, 0)])
        hyps = decode(model, batch["feats"], batch["feats_lengths"], options)
        for mode in modes:
            expected[mode].append(tokenizer.decode(hyps[mode][0]))
    for mode in modes:
        lines = read_text(tmp_path / "pen" / mode / "text")
        assert [line[0] for line in lines] == [e.key for e in entries]
        assert [line[1] if len(line) > 1 else "" for line in lines] == expected[mode], mode

    encode_calls, chunk_calls = [], []
    full_encode = AsrModel.encode

    def encode(self, feats, feats_lengths, **chunking):
        encode_calls.append(chunking)
        return full_encode(self, feats, feats_lengths)

    def forward_chunk_by_chunk(self, xs, decoding_chunk_size, num_decoding_left_chunks):
        chunk_calls.append((xs.size(0), decoding_chunk_size, num_decoding_left_chunks))
        return self(xs, torch.tensor([xs.size(1)]))
    monkeypatch.setattr(AsrModel, "encode", encode)
    monkeypatch.setattr(type(model.encoder), "forward_chunk_by_chunk", forward_chunk_by_chunk, raising=False)
    chunk_trained = ["--override", "encoder_conf.use_dynamic_chunk=true"]  # (chunks need a chunk-trained model)
    runs = {"full": [], "chunk": ["--decoding_chunk_size", "4", "--num_decoding_left_chunks", "2", *chunk_trained],
            "stream": ["--decoding_chunk_size", "8", "--simulate_streaming", "--batch_size", "5", *chunk_trained]}
    for name, options in runs.items():
        assert main(common + ["--result_dir", str(tmp_path / name), *options]) == 0
    batches = -(-len(entries) // 16)
    assert encode_calls == [{}] * batches + [{"chunk_size": 4, "num_left_chunks": 2}] * batches
    assert chunk_calls == [(1, 8, -1)] * len(entries)
    for mode in modes:
        assert read_text(tmp_path / "chunk" / mode / "text") == read_text(tmp_path / "full" / mode / "text")
        assert read_text(tmp_path / "stream" / mode / "text") == read_text(tmp_path / "full" / mode / "text")


def test_chunked_decoding_of_a_full_context_model_is_refused_before_the_model_is_built(experiment, tiny_corpus,
                                                                                     tmp_path, caplog):
    """The tiny model has no chunk training: --decoding_chunk_size 4 would garble its output."""
    root, _, _ = experiment
    code = main(["--config", str(root / "train.yaml"), "--checkpoint", str(tmp_path / "absent.pt"),
                 "--data", str(tiny_corpus.splits["dev"].data_list), "--result_dir", str(tmp_path / "d"),
                 "--decoding_chunk_size", "4"])
    assert code == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "decoding_chunk_size 4: the model was trained with full context only" in errors[0]
    assert not (tmp_path / "d").exists()


def test_recognize_dtype_runs_the_model_passes_under_autocast(experiment, tiny_corpus, tmp_path, monkeypatch):
    """--dtype bf16: the encoder runs under CPU autocast in bf16 (recorded by a stand-in
    encode); --dtype fp32 (the default) without autocast."""
    root, _, _ = experiment
    data = tiny_corpus.splits["dev"].data_list
    seen = []
    full_encode = AsrModel.encode

    def encode(self, feats, feats_lengths, **chunking):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return full_encode(self, feats, feats_lengths, **chunking)
    monkeypatch.setattr(AsrModel, "encode", encode)
    common = ["--config", str(root / "train.yaml"), "--checkpoint", str(root / "ckpt.pt"), "--data", str(data),
              "--modes", "ctc_greedy_search", "attention_rescoring", "--beam_size", "3"]
    assert main(common + ["--result_dir", str(tmp_path / "bf16"), "--dtype", "bf16"]) == 0
    assert seen and set(seen) == {(True, torch.bfloat16)}
    seen.clear()
    assert main(common + ["--result_dir", str(tmp_path / "fp32")]) == 0
    assert seen and {on for on, _ in seen} == {False}
    assert (tmp_path / "bf16" / "attention_rescoring" / "text").is_file()


# ----------------------------------------------------------------------------- LM fusion and biasing


@pytest.fixture(scope="module")
def digits_lm(tiny_corpus, tmp_path_factory):
    """A 2-gram word LM of the tiny corpus's training transcripts (tools/train_lm.py)."""
    from tests.helpers import run_tool
    path = tmp_path_factory.mktemp("lm") / "lm.arpa"
    run_tool("train_lm.py", "--order", "2", "--discount_fallback", tiny_corpus.splits["train"].text, path)
    return path


def test_recognize_with_lm_and_phrases_equals_decode_with_fusion(experiment, tiny_corpus, digits_lm, tmp_path):
    from asrkit.decode.options import build_fusion
    root, cfg, model = experiment
    data = tiny_corpus.splits["test"].data_list
    (tmp_path / "phrases.txt").write_text("one two\nseven\n", encoding="utf-8")
    modes = ["ctc_prefix_beam_search", "attention_rescoring"]
    code = main(["--config", str(root / "train.yaml"), "--checkpoint", str(root / "ckpt.pt"), "--data", str(data),
                 "--result_dir", str(tmp_path / "d"), "--modes", *modes, "--beam_size", "3", "--lm_path",
                 str(digits_lm), "--lm_weight", "0.4", "--word_bonus", "1.5", "--context_bias_mode", "decoding-graph",
                 "--context_list_path", str(tmp_path / "phrases.txt"), "--context_graph_score", "2"])
    assert code == 0
    options = DecodingOptions(modes=modes, beam_size=3, lm_path=str(digits_lm), lm_weight=0.4, word_bonus=1.5,
                              context_phrases=("one two", "seven"), context_graph_score=2.0)
    tokenizer = build_tokenizer(cfg)
    fusion = build_fusion(options, tokenizer)
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False)
    for entry in read_list(data)[:4]:
        batch = processor.collate([processor(entry, 0)])
        hyps = decode(model, batch["feats"], batch["feats_lengths"], options, fusion)
        for mode in modes:
            written = dict(read_text(tmp_path / "d" / mode / "text"))
            assert written.get(entry.key, "") == tokenizer.decode(hyps[mode][0])


@pytest.mark.parametrize("case, message", [
    ("truncated", "truncated"), ("not_arpa", "not an ARPA file"), ("empty_list", "the context list is empty"),
    ("unknown_unit", "the unit 'q' is not one of the model's units"), ("deep", "deep-biasing needs a model")])
def test_lm_and_phrase_list_bad_input_exit_2_in_one_line(experiment, tiny_corpus, digits_lm, tmp_path, caplog,
                                                         case, message):
    root, _, _ = experiment
    lines = digits_lm.read_text(encoding="utf-8").splitlines()
    (tmp_path / "truncated.arpa").write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
    (tmp_path / "not_arpa.arpa").write_text("one two three\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    (tmp_path / "unknown.txt").write_text("one\nquick\n", encoding="utf-8")
    extra = {"truncated": ["--lm_path", tmp_path / "truncated.arpa"],
             "not_arpa": ["--lm_path", tmp_path / "not_arpa.arpa"],
             "empty_list": ["--context_list_path", tmp_path / "empty.txt"],
             "unknown_unit": ["--context_list_path", tmp_path / "unknown.txt"],
             "deep": ["--context_bias_mode", "deep-biasing", "--context_list_path", tmp_path / "unknown.txt"]}[case]
    code = main(["--config", str(root / "train.yaml"), "--checkpoint", str(tmp_path / "never_read.pt"),
                 "--data", str(tiny_corpus.splits["dev"].data_list), "--result_dir", str(tmp_path / "d"),
                 "--modes", "attention_rescoring", *map(str, extra)])
    assert code == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0], errors
    assert not (tmp_path / "d").exists()


# ----------------------------------------------------------------------------- lists, scoring, skips


def dev_rows(tiny_corpus) -> list[dict]:
    return [json.loads(line) for line in tiny_corpus.splits["dev"].data_list.read_text().splitlines()]


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def hypotheses(path) -> dict[str, str]:
    return read_kaldi_text(path.read_text(encoding="utf-8").splitlines(), str(path))


def errors_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("case", ["duplicate", "space", "tab", "empty"])
def test_a_list_repeating_a_key_or_with_a_key_kaldi_cannot_read_is_refused_in_one_line(
        experiment, tiny_corpus, tmp_path, caplog, case):
    """A repeated key would pair one line's reference with another's hypothesis (it scored
    12.90 % where the list without the repeat scores 2.63 %); a key with whitespace would be
    written unquoted into the Kaldi text.  Both: exit 2, one line naming the list, the key
    and the line(s), before the model loads; nothing written."""
    root, _, _ = experiment
    rows = dev_rows(tiny_corpus)[:4]
    rows, message = {
        "duplicate": (rows + [dict(rows[1], wav=rows[3]["wav"])],
                      f"duplicate key {rows[1]['key']!r} at line 2 and line 5"),
        "space": ([*rows[:2], dict(rows[2], key="spk utt")], "line 3: key 'spk utt' holds whitespace (' '"),
        "tab": ([*rows[:2], dict(rows[2], key="spk\tutt")], "line 3: key 'spk\\tutt' holds whitespace ('\\t'"),
        "empty": ([dict(rows[0], key="")], "line 1: key '' is empty")}[case]
    data = write_rows(tmp_path / "data.list", rows)
    code = main(["--config", str(root / "train.yaml"), "--checkpoint", str(tmp_path / "never_read.pt"),
                 "--data", data, "--result_dir", str(tmp_path / "d"), "--score", "char"])
    assert code == 2
    errors = errors_of(caplog)
    assert len(errors) == 1 and errors[0].startswith(f"{data}: ") and message in errors[0], errors
    assert "\n" not in errors[0] and not (tmp_path / "d").exists()


def test_an_unlabelled_list_decodes_and_a_mixed_one_scores_its_labelled_utterances(experiment, tiny_corpus,
                                                                                  tmp_path, caplog):
    """No txt: the hypotheses are written (the same as for the labelled list) and, with
    --score, nothing is scored -- one log line, no wer file (a stale one is removed).  Some
    without txt: only the others are scored, and the wer file says how many were not.
    "txt": "" is a transcript (silence): decoded and scored, not skipped."""
    caplog.set_level(logging.INFO, logger="asrkit.recognize")
    root, _, _ = experiment
    rows = dev_rows(tiny_corpus)
    common = ["--config", str(root / "train.yaml"), "--checkpoint", str(root / "ckpt.pt"),
              "--modes", "ctc_greedy_search", "--score", "char"]
    labelled = write_rows(tmp_path / "labelled.list", rows)
    assert main(common + ["--data", labelled, "--result_dir", str(tmp_path / "labelled")]) == 0
    hyps = hypotheses(tmp_path / "labelled" / "ctc_greedy_search" / "text")
    assert len(hyps) == len(rows)

    stale = tmp_path / "none" / "ctc_greedy_search" / "wer"
    stale.parent.mkdir(parents=True)
    stale.write_text("%CER 99.00 [ from an earlier decode ]\n")
    caplog.clear()
    unlabelled = write_rows(tmp_path / "unlabelled.list", [{k: v for k, v in r.items() if k != "txt"} for r in rows])
    assert main(common + ["--data", unlabelled, "--result_dir", str(tmp_path / "none")]) == 0
    assert hypotheses(tmp_path / "none" / "ctc_greedy_search" / "text") == hyps
    assert not stale.exists()
    assert any("nothing to score: no decoded utterance has a transcript (not scored: 0 skipped, 12 without "
               "transcript)" in m for m in caplog.messages), caplog.messages
    assert not any("%CER" in m for m in caplog.messages)

    mixed_rows = [dict(r, txt=None) if i % 3 == 0 else r for i, r in enumerate(rows)]
    mixed_rows[1] = dict(mixed_rows[1], txt="")
    mixed = write_rows(tmp_path / "mixed.list", mixed_rows)
    assert main(common + ["--data", mixed, "--result_dir", str(tmp_path / "mixed")]) == 0
    assert hypotheses(tmp_path / "mixed" / "ctc_greedy_search" / "text") == hyps
    refs = {r["key"]: r["txt"] for r in mixed_rows if r["txt"] is not None}
    totals, _ = score(refs, {k: hyps[k] for k in refs}, "char")
    wer = (tmp_path / "mixed" / "ctc_greedy_search" / "wer").read_text(encoding="utf-8").splitlines()
    assert wer[-3:] == [totals.summary("CER"), totals.sentence_summary(),
                        "scored 8 utterances; not scored: 0 skipped, 4 without transcript"]
    assert [line.split()[1] for line in wer if line.startswith("utt: ")] == list(refs)


def test_skipped_utterances_are_reported_apart_and_never_scored(experiment, tiny_corpus, tmp_path, caplog):
    """A missing file, an empty one and one shorter than the model's shortest input are not
    decoded: left out of the text, counted by reason in the log and on the wer file's last
    line, and not in the score, which covers the decoded utterances exactly."""
    from tests.data.audio_helpers import tone, write_wav
    caplog.set_level(logging.INFO, logger="asrkit.recognize")
    root, _, _ = experiment
    rows = dev_rows(tiny_corpus)[:6]
    short = write_wav(tmp_path / "short.wav", tone(0.05))  # 3 feature frames < 7
    empty = write_wav(tmp_path / "empty.wav", tone(0.0))
    bad = [dict(rows[0], key="gone", wav=str(tmp_path / "gone.wav")),
           dict(rows[1], key="short", wav=str(short), duration=0.05),
           dict(rows[2], key="empty", wav=str(empty), duration=0.0)]
    data = write_rows(tmp_path / "data.list", rows[:3] + bad + rows[3:])
    assert main(["--config", str(root / "train.yaml"), "--checkpoint", str(root / "ckpt.pt"), "--data", data,
                 "--result_dir", str(tmp_path / "d"), "--modes", "ctc_greedy_search", "attention",
                 "--beam_size", "2", "--score", "char"]) == 0
    line = "not scored: 3 skipped (1 empty_audio, 1 missing_file, 1 too_short), 0 without transcript"
    for mode in ("ctc_greedy_search", "attention"):
        hyps = hypotheses(tmp_path / "d" / mode / "text")
        assert list(hyps) == [r["key"] for r in rows]  # (list order, the skipped ones left out)
        totals, _ = score({r["key"]: r["txt"] for r in rows}, hyps, "char")
        wer = (tmp_path / "d" / mode / "wer").read_text(encoding="utf-8").splitlines()
        assert wer[-3:] == [totals.summary("CER"), totals.sentence_summary(), f"scored 6 utterances; {line}"]
        assert f"{mode}: {totals.summary('CER')}; scored 6 utterances, {line}" in caplog.messages
    skips = {m.split(" (")[0] for m in caplog.messages if m.startswith("skipped ")}
    assert skips == {"skipped gone", "skipped short", "skipped empty"}


def test_relative_config_paths_are_found_from_anywhere_as_transcribe_finds_them(experiment, tiny_corpus, tmp_path,
                                                                                monkeypatch, caplog):
    """A recipe's train.yaml (recipe/exp/x/) naming its units relative to the recipe decodes
    from another working directory; a file found nowhere is one line naming every path
    tried, exit 2.  The model layer's CMVN, which decoding takes from the checkpoint, need
    not exist."""
    import shutil
    root, _, _ = experiment
    recipe, exp, elsewhere = tmp_path / "recipe", tmp_path / "recipe" / "exp" / "x", tmp_path / "elsewhere"
    for folder in (recipe / "data" / "dict", exp, elsewhere):
        folder.mkdir(parents=True)
    shutil.copy(root / "units.txt", recipe / "data" / "dict" / "units.txt")
    config = yaml.safe_load((root / "train.yaml").read_text(encoding="utf-8"))
    config["tokenizer_conf"]["symbol_table_path"] = "data/dict/units.txt"
    config["cmvn_conf"]["cmvn_file"] = "data/gone/global_cmvn"
    (exp / "train.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    common = ["--checkpoint", str(root / "ckpt.pt"), "--data", str(tiny_corpus.splits["dev"].data_list),
              "--modes", "ctc_greedy_search"]
    assert main(common + ["--config", str(root / "train.yaml"), "--result_dir", str(tmp_path / "want")]) == 0
    monkeypatch.chdir(elsewhere)  # neither the recipe nor the experiment
    assert main(common + ["--config", "../recipe/exp/x/train.yaml", "--result_dir", str(tmp_path / "got")]) == 0
    assert hypotheses(tmp_path / "got" / "ctc_greedy_search" / "text") == \
        hypotheses(tmp_path / "want" / "ctc_greedy_search" / "text")
    config["tokenizer_conf"]["symbol_table_path"] = "data/dict/other.txt"
    (exp / "train.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    assert main(common + ["--config", "../recipe/exp/x/train.yaml", "--result_dir", str(tmp_path / "no")]) == 2
    [error] = errors_of(caplog)
    tried = [(d / "data/dict/other.txt").resolve() for d in (recipe, exp, elsewhere)]
    assert error.startswith("units file not found: data/dict/other.txt (tokenizer_conf.symbol_table_path of "
                            f"{exp / 'train.yaml'}; looked for {', '.join(map(str, tried))})"), error
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("dtype, flags, warned", [("bf16", {"avx2", "fma"}, True),
                                                  ("bf16", {"avx2", "avx512_bf16"}, False),
                                                  ("fp32", {"avx2", "fma"}, False)])
def test_bf16_on_a_cpu_without_native_bf16_logs_trainings_warning(experiment, tiny_corpus, tmp_path, monkeypatch,
                                                                 caplog, dtype, flags, warned):
    """The CPU's flags injected (this machine has avx512_bf16, CI's alternate with AVX2-only
    ones): --dtype bf16 without native bf16 logs the line training logs, once."""
    import asrkit.precision as precision
    caps = precision.CpuCapabilities(frozenset(flags), "AVX2")
    monkeypatch.setattr(precision, "cpu_capabilities", lambda cpuinfo=None: caps)
    root, _, _ = experiment
    assert main(["--config", str(root / "train.yaml"), "--checkpoint", str(root / "ckpt.pt"), "--data",
                 str(tiny_corpus.splits["dev"].data_list), "--result_dir", str(tmp_path / "d"),
                 "--modes", "ctc_greedy_search", "--dtype", dtype]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "asrkit.recognize"]
    assert warnings == ([precision.cpu_precision("bf16", caps).line] if warned else [])
    if warned:
        assert "without native bf16" in warnings[0]
