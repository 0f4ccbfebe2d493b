"""asrkit.bin.export end to end (train.yaml + checkpoint -> final.zip) and
tools/decode_exported.py on real wav files, without importing asrkit."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf
import torch

from asrkit.bin.export import main
from asrkit.config import load_config
from asrkit.data.lists import read_list
from asrkit.data.processors import build_sample_processor
from asrkit.decode import DecodingOptions, decode
from asrkit.export import load_exported
from asrkit.models import build_model
from asrkit.text import build_tokenizer
from tests.helpers import REPO

MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def exported(tiny_experiment, tmp_path_factory):
    """A tiny experiment's train.yaml (global CMVN layer, 40-dim fbank, char units), a
    checkpoint of a random model biased to emit a few tokens, and its export."""
    root = tmp_path_factory.mktemp("export")
    config = tiny_experiment.config(root / "train.yaml")
    cfg = load_config(config)
    tokenizer = build_tokenizer(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, 40, tokenizer.vocabulary)
    with torch.no_grad():
        model.ctc.ctc_lo.bias[0] += 1.5  # mostly blank, a few tokens per utterance
        model.decoder.output_layer.bias[model.eos] += 0.5
    torch.save({"model": model.state_dict(), "step": 3}, root / "avg.pt")
    return root, cfg, tokenizer, model.eval()


def test_export_cli_writes_a_verified_archive(exported, capsys):
    root, cfg, tokenizer, model = exported
    out = root / "final.zip"
    assert main(["--config", str(root / "train.yaml"), "--checkpoint", str(root / "avg.pt"),
                 "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "verified against eager decoding" in printed and "attention_rescoring" in printed
    assert sorted(p.name for p in root.iterdir()) == ["avg.pt", "final.zip", "train.yaml"]  # no temporaries
    module, extra = load_exported(out)
    assert extra["train.yaml"] == (root / "train.yaml").read_text(encoding="utf-8")
    assert [line.split()[0] for line in extra["units.txt"].splitlines()] == tokenizer.symbols
    assert module.units() == tokenizer.symbols
    meta = json.loads(extra["meta.json"])
    assert meta["num_mel_bins"] == 40 and meta["sample_rate"] == 16000 and not meta["feature_cmvn_included"]
    assert module.eos_symbol() == tokenizer.vocab_size - 1
    # the CMVN statistics travel inside the module: it takes raw fbank
    torch.testing.assert_close(module.normalizer.cmvn.mean, model.cmvn.mean, rtol=0, atol=0)


def test_export_cli_takes_a_data_pipeline_cmvn_into_the_model(tiny_experiment, tmp_path):
    config = tiny_experiment.config(tmp_path / "train.yaml", cmvn=None,
                                    dataset_conf={"cmvn_file": str(tiny_experiment.cmvn)})
    cfg = load_config(config)
    torch.manual_seed(1)
    model = build_model(cfg, 40, build_tokenizer(cfg).vocabulary)
    torch.save(model.state_dict(), tmp_path / "bare.pt")
    assert main(["--config", str(config), "--checkpoint", str(tmp_path / "bare.pt"),
                 "--output", str(tmp_path / "final.zip")]) == 0  # verified with the CMVN applied eagerly
    module, extra = load_exported(tmp_path / "final.zip")
    assert json.loads(extra["meta.json"])["feature_cmvn_included"]
    assert module.normalizer.feature_cmvn is not None and module.normalizer.cmvn is None


def test_export_cli_errors(exported, tmp_path, caplog):
    root, _, _, _ = exported
    common = ["--config", str(root / "train.yaml"), "--output", str(tmp_path / "final.zip")]
    assert main(common + ["--checkpoint", str(tmp_path / "missing.pt")]) == 2
    assert "checkpoint not found" in caplog.text
    assert main(common + ["--checkpoint", str(root / "avg.pt"), "--override", "encoder_conf.num_blocks=3"]) == 2
    assert "does not match" in caplog.text
    assert not (tmp_path / "final.zip").exists()


def exported_archive(root):
    """``root/final.zip``, exported from the fixture's averaged model unless a test already did."""
    if not (root / "final.zip").exists():
        assert main(["--config", str(root / "train.yaml"), "--checkpoint", str(root / "avg.pt"),
                     "--output", str(root / "final.zip"), "--no_verify"]) == 0
    return root / "final.zip"


def test_decode_exported_tool_matches_eager_recognition(exported, tiny_corpus, tmp_path):
    root, cfg, tokenizer, model = exported
    exported_archive(root)
    entries = read_list(tiny_corpus.splits["test"].data_list)[:5]
    scp = tmp_path / "wav.scp"
    scp.write_text("".join(f"{e.key} {e.wav}\n" for e in entries[:3]), encoding="utf-8")
    extra_wavs = [e.wav for e in entries[3:]]  # keys: file names without the extension
    keys = [e.key for e in entries[:3]] + [e.wav.rsplit("/", 1)[-1].rsplit(".", 1)[0] for e in entries[3:]]
    # run as a deployment would: asrkit must not be imported
    runner = ("import runpy, sys\n"
              "sys.argv = ['decode_exported.py'] + sys.argv[1:]\n"
              "try:\n"
              f"    runpy.run_path({str(REPO / 'tools' / 'decode_exported.py')!r}, run_name='__main__')\n"
              "except SystemExit as e:\n"
              "    code = e.code\n"
              "assert not [m for m in sys.modules if m.split('.')[0] in ('asrkit', 'tests')], 'asrkit imported'\n"
              "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", runner, "--model", str(root / "final.zip"), "--wav_scp", str(scp),
                           *extra_wavs, "--beam_size", "3", "--batch_size", "2", "--num_threads", "1",
                           "--result_dir", str(tmp_path / "decode")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "RTF" in proc.stderr
    printed = [line.split(" ", 1) for line in proc.stdout.splitlines()]
    assert [p[0] for p in printed] == keys  # input order

    # eager asrkit: the recognizer's feature chain, the same batches (longest first, 2 at a time)
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False)
    durations = [sf.info(e.wav).frames / sf.info(e.wav).samplerate for e in entries]
    order = sorted(range(len(entries)), key=lambda i: -durations[i])
    expected = {m: {} for m in MODES}
    for first in range(0, len(order), 2):
        group = order[first:first + 2]
        batch = processor.collate([processor(entries[i], 0) for i in group])
        hyps = decode(model, batch["feats"], batch["feats_lengths"], DecodingOptions(modes=MODES, beam_size=3))
        for mode in MODES:
            for j, i in enumerate(group):
                expected[mode][keys[i]] = tokenizer.decode(hyps[mode][j])
    assert {p[0]: (p[1] if len(p) > 1 else "") for p in printed} == expected["attention_rescoring"]
    for mode in MODES:
        lines = (tmp_path / "decode" / mode / "text").read_text(encoding="utf-8").splitlines()
        assert {k: t for k, _, t in (line.partition(" ") for line in lines)} == expected[mode], mode
    assert any(expected["ctc_greedy_search"].values())


def test_decode_exported_tool_decodes_with_attention(exported, tiny_corpus, tmp_path):
    """``--mode attention`` runs the exported attention beam search (asrkit.decode's,
    compiled) and prints what eager decoding gives.  The tool runs directly (it is
    executable, as docs/export.md runs it); a missing wav and a text file in its wav.scp
    are one warning line each, the other wavs are still decoded, and the status is 2."""
    root, cfg, tokenizer, model = exported
    exported_archive(root)
    entries = read_list(tiny_corpus.splits["test"].data_list)[:2]
    (tmp_path / "notes.wav").write_text("not audio")
    scp = tmp_path / "wav.scp"
    scp.write_text(f"{entries[0].key} {entries[0].wav}\nlost {tmp_path / 'lost.wav'}\nnotes notes.wav\n"
                   f"{entries[1].key} {entries[1].wav}\n", encoding="utf-8")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run([str(REPO / "tools" / "decode_exported.py"), "--model", str(root / "final.zip"),
                           "--wav_scp", str(scp), "--mode", "attention", "--beam_size", "2",
                           "--batch_size", "1", "--num_threads", "1"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, proc.stderr
    assert warnings[0].startswith(f"warning: lost: {tmp_path / 'lost.wav'}: not readable audio, skipped")
    assert warnings[1].startswith("warning: notes: ") and "notes.wav" in warnings[1]
    assert "2 input(s) skipped" in proc.stderr
    assert [line.split(" ", 1)[0] for line in proc.stdout.splitlines()] == [entries[0].key, entries[1].key]
    processor = build_sample_processor(cfg.dataset_conf, tokenizer, train=False, seed=0, apply_filter=False)
    expected = {}
    for entry in entries:
        batch = processor.collate([processor(entry, 0)])
        hyps = decode(model, batch["feats"], batch["feats_lengths"], DecodingOptions(modes=["attention"],
                                                                                     beam_size=2))
        expected[entry.key] = tokenizer.decode(hyps["attention"][0])
    printed = dict((line.split(" ", 1) + [""])[:2] for line in proc.stdout.splitlines())
    assert printed == expected

