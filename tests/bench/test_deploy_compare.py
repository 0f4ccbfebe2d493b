"""bench/deploy_compare.py runs as documented on an experiment laid out as stage 6 leaves
it (train.yaml, final.zip, onnx/ with a streaming model) and reports a row per engine
whose CER agrees with what the test computes itself and whose time lies inside the run."""
from __future__ import annotations

import json
import time

import pytest
import torch

from asrkit.bin.export import main as export_main
from asrkit.bin.export_onnx import main as export_onnx_main
from asrkit.config import load_config
from asrkit.export.sherpa import FeatureMismatchWarning
from asrkit.models import build_model
from asrkit.text import build_tokenizer
from bench import deploy_compare as bench

pytestmark = [pytest.mark.usefixtures("restore_threads"), pytest.mark.slow]  # (exports and 13 decodes: ~20 s)
RUNTIME_FBANK = {"fbank_conf": {"snip_edges": False, "high_freq": -400}}  # what sherpa-onnx computes


def test_deploy_compare_reports_every_engine(tiny_experiment, tmp_path, capsys):
    config = tiny_experiment.config(tmp_path / "train.yaml", encoder_conf={"use_dynamic_chunk": True,
                                                                            "causal": True},
                                    dataset_conf=RUNTIME_FBANK)
    cfg = load_config(config)
    torch.manual_seed(0)
    model = build_model(cfg, 40, build_tokenizer(cfg).vocabulary)
    with torch.no_grad():
        model.ctc.ctc_lo.bias[0] += 1.5
    torch.save({"model": model.state_dict()}, tmp_path / "avg.pt")
    common = ["--config", str(config), "--checkpoint", str(tmp_path / "avg.pt")]
    assert export_main([*common, "--output", str(tmp_path / "final.zip")]) == 0
    assert export_onnx_main([*common, "--output_dir", str(tmp_path / "onnx")]) == 0
    capsys.readouterr()
    start = time.perf_counter()
    assert bench.main(["--exp", str(tmp_path), "--checkpoint", str(tmp_path / "avg.pt"), "--data",
                       str(tiny_experiment.corpus.splits["test"].data_list), "--max_utts", "4", "--chunk", "4",
                       "--left_chunks", "2", "--beam_size", "3", "--json", str(tmp_path / "rows.json")]) == 0
    wall = time.perf_counter() - start
    printed = capsys.readouterr().out
    rows = json.loads((tmp_path / "rows.json").read_text())
    engines = [(r["engine"], r["search"]) for r in rows]
    assert ("sherpa-onnx streaming fp32, chunk 4, 2 left", "ctc_greedy_search") in engines
    assert len(engines) == 13 and all(f"| {r['engine']} | {r['search']} |" in printed for r in rows)
    same = {(r["engine"], r["search"]): r["same_as_reference"] for r in rows}
    assert same[("onnxruntime fp32", "ctc_greedy_search")] == 4 and same[("asrkit eager", "attention_rescoring")] is None
    assert same[("asrkit eager, chunk 4, 2 left, fed as sherpa-onnx", "ctc_greedy_search")] == 4  # (its own reference)
    assert same[("sherpa-onnx streaming fp32, chunk 4, 2 left", "ctc_greedy_search")] is not None
    cer = {(r["engine"], r["search"]): r["cer"] for r in rows}
    greedy = cer[("asrkit eager", "ctc_greedy_search")]
    # the same greedy search over the same fbank and numbers: the same transcripts
    for engine in ("TorchScript final.zip", "onnxruntime fp32"):
        assert cer[(engine, "ctc_greedy_search")] == greedy, engine
    # sherpa-onnx computes its own fbank (equal to ~1e-5): on this random model, whose
    # posteriors are near ties, a character may flip (the exact equality on trained models
    # and fixed wavs is tests/export/test_onnx.py's); a row of another engine would be far off.
    # One flip is ~2 CER points on these 4 short utterances, and a near tie can flip several
    # (6.4 points were seen once beside another worker): 15 still refuses a wrong engine (~100).
    assert abs(cer[("sherpa-onnx offline fp32", "ctc_greedy_search")] - greedy) < 15.0
    assert cer[("TorchScript final.zip", "attention_rescoring")] == cer[("asrkit eager", "attention_rescoring")]
    assert all(0 < r["rtf"] for r in rows)
    audio = 4 * 0.5  # (lower bound: the tiny corpus' utterances are longer than 0.5 s)
    assert sum(r["rtf"] for r in rows) * audio < wall
    sizes = {r["engine"]: r["mb"] for r in rows if r["mb"]}
    assert sizes["onnxruntime int8"] < sizes["onnxruntime fp32"]


def test_a_model_on_other_features_gets_marked_rows(tiny_experiment, tmp_path, capsys):
    """WeNet's fbank: sherpa-onnx's rows are built anyway (public API, allowing the
    mismatch) and marked, with the one-line reason on stderr."""
    config = tiny_experiment.config(tmp_path / "train.yaml")
    cfg = load_config(config)
    torch.manual_seed(0)
    torch.save({"model": build_model(cfg, 40, build_tokenizer(cfg).vocabulary).state_dict()}, tmp_path / "avg.pt")
    common = ["--config", str(config), "--checkpoint", str(tmp_path / "avg.pt")]
    assert export_main([*common, "--output", str(tmp_path / "final.zip")]) == 0
    assert export_onnx_main([*common, "--output_dir", str(tmp_path / "onnx"), "--int8", "false"]) == 0
    (tmp_path / "onnx" / "model.int8.onnx").symlink_to(tmp_path / "onnx" / "model.onnx")
    capsys.readouterr()
    with pytest.warns(FeatureMismatchWarning):
        assert bench.main(["--exp", str(tmp_path), "--checkpoint", str(tmp_path / "avg.pt"), "--data",
                           str(tiny_experiment.corpus.splits["test"].data_list), "--max_utts", "1",
                           "--beam_size", "2", "--json", str(tmp_path / "rows.json")]) == 0
    captured = capsys.readouterr()
    engines = [r["engine"] for r in json.loads((tmp_path / "rows.json").read_text())]
    assert "sherpa-onnx offline fp32 (features differ)" in engines
    assert "warning: the model's features are not what sherpa-onnx computes" in captured.err


def test_deploy_compare_transducer_rows(tmp_path, monkeypatch, capsys):
    """A transducer (WeNet's U2++ transducer fixture, exported as stage 6 does: final.zip and
    sherpa-onnx's layout, offline + streaming): eager, TorchScript, onnxruntime and
    sherpa-onnx rows; onnxruntime fp32 runs the reference's search over the graphs, so it
    gives its transcripts exactly; sherpa-onnx's are counted against the reference."""
    import shutil

    import soundfile as sf

    from asrkit.export.archive import export_model
    from asrkit.export.onnx_transducer import Fbank, export_transducer_onnx
    from tests.models.transducer.wenet_transducer import FIXTURES, load_wenet_transducer
    exp = tmp_path / "exp"
    shutil.copytree(FIXTURES / "rnnt_stateless_u2pp", exp)
    monkeypatch.chdir(exp)  # (WeNet's config names its files relative to the experiment)
    model = load_wenet_transducer("rnnt_stateless_u2pp")
    units = [line.split()[0] for line in (exp / "units.txt").read_text().splitlines()]
    export_model(model, units, exp / "final.zip", sample_rate=16000, num_mel_bins=80, frame_length=25.0,
                 frame_shift=10.0, config_text=(exp / "train.yaml").read_text())
    export_transducer_onnx(model, units, exp / "onnx", fbank=Fbank.from_config(load_config(exp / "train.yaml")),
                           streaming=True, chunk_size=4, num_left_chunks=2)
    wavs = sorted((FIXTURES.parent / "wavs").glob("*.wav"))
    rows = [{"key": w.stem, "wav": str(w), "txt": "one two", "duration": sf.info(str(w)).duration} for w in wavs]
    (tmp_path / "data.list").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench.main(["--exp", str(exp), "--checkpoint", str(exp / "epoch_5.pt"), "--data", str(tmp_path / "data.list"),
                       "--beam_size", "3", "--json", str(tmp_path / "rows.json")]) == 0
    printed = capsys.readouterr().out
    got = {(r["engine"], r["search"]): r for r in json.loads((tmp_path / "rows.json").read_text())}
    one = "greedy, 1 symbol/frame"
    assert got[("asrkit eager, runtime features", one)]["is_reference"]
    assert got[("onnxruntime fp32", one)]["same_as_reference"] == 3
    for engine in ("onnxruntime int8", "sherpa-onnx offline fp32", "sherpa-onnx offline int8",
                   "sherpa-onnx streaming fp32, chunk 4, 2 left"):
        assert got[(engine, one)]["same_as_reference"] is not None, engine
    assert got[("sherpa-onnx offline fp32", one)]["same_as_reference"] >= 2  # (one dither flip allowed)
    assert (got[("TorchScript final.zip", "rnnt_greedy_search")]["cer"]
            == got[("asrkit eager", "rnnt_greedy_search")]["cer"])
    assert "| sherpa-onnx streaming int8, chunk 4, 2 left | greedy, 1 symbol/frame |" in printed
