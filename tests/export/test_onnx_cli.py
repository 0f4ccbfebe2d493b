"""asrkit.bin.export_onnx end to end: train.yaml + checkpoint -> model.onnx, int8 copy and
tokens.txt (checked against eager), and its refusals (one line, status 2)."""
import pytest
import torch

from asrkit.bin.export_onnx import main
from asrkit.config import load_config
from asrkit.models import build_model
from asrkit.text import build_tokenizer

pytestmark = pytest.mark.usefixtures("restore_threads")


def experiment(tiny_experiment, root, **top):
    config = tiny_experiment.config(root / "train.yaml", **top)
    cfg = load_config(config)
    torch.manual_seed(0)
    model = build_model(cfg, 40, build_tokenizer(cfg).vocabulary)
    torch.save({"model": model.state_dict(), "step": 3}, root / "avg.pt")
    return ["--config", str(config), "--checkpoint", str(root / "avg.pt")]


def test_cli_writes_checked_offline_models_and_tokens(tiny_experiment, tmp_path, capsys):
    args = experiment(tiny_experiment, tmp_path)
    assert main([*args, "--output_dir", str(tmp_path / "onnx")]) == 0
    printed = capsys.readouterr().out
    assert "max |log-prob diff| vs eager under onnxruntime: model.onnx" in printed
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["model.int8.onnx", "model.onnx", "tokens.txt"]
    units = tiny_experiment.units.read_text(encoding="utf-8").split("\n")[0].split()[0]
    assert (tmp_path / "onnx" / "tokens.txt").read_text(encoding="utf-8").startswith(f"{units} 0\n")


def test_cli_writes_the_streaming_model_of_a_dynamic_chunk_model(tiny_experiment, tmp_path):
    args = experiment(tiny_experiment, tmp_path, encoder_conf={"use_dynamic_chunk": True, "causal": True})
    assert main([*args, "--output_dir", str(tmp_path / "onnx"), "--int8", "false"]) == 0
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["model-streaming.onnx", "model.onnx",
                                                                     "tokens.txt"]


def test_cli_refuses_what_the_layout_cannot_carry(tiny_experiment, tmp_path, caplog):
    args = experiment(tiny_experiment, tmp_path, model_conf={"ctc_weight": 0.0})
    assert main([*args, "--output_dir", str(tmp_path / "a")]) == 2
    assert "no CTC head" in caplog.text and not (tmp_path / "a").exists()
    args = experiment(tiny_experiment, tmp_path)
    caplog.clear()
    assert main([*args, "--output_dir", str(tmp_path / "b"), "--streaming", "true"]) == 2
    assert "full context only" in caplog.text and not (tmp_path / "b").exists()


def test_cli_warns_in_one_line_when_sherpa_onnx_computes_other_features(tiny_experiment, tmp_path, caplog):
    """WeNet's fbank (snip_edges true, top mel edge at Nyquist): exported, with one warning
    line saying what to set; kaldi-native-fbank's (snip_edges false, high_freq −400): no
    warning, and the metadata records them."""
    from asrkit.export.sherpa import read_metadata
    args = experiment(tiny_experiment, tmp_path)
    assert main([*args, "--output_dir", str(tmp_path / "a"), "--int8", "false"]) == 0
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "\n" not in warned[0].getMessage()
    assert ("snip_edges true (sherpa-onnx: false), high_freq 0 (sherpa-onnx: -400)" in warned[0].getMessage()
            and "Train with dataset_conf.fbank_conf snip_edges: false, high_freq: -400" in warned[0].getMessage())
    assert read_metadata(tmp_path / "a" / "model.onnx")["asrkit_snip_edges"] == "true"
    caplog.clear()
    args = experiment(tiny_experiment, tmp_path,
                      dataset_conf={"fbank_conf": {"snip_edges": False, "high_freq": -400}})
    assert main([*args, "--output_dir", str(tmp_path / "b"), "--int8", "false"]) == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    meta = read_metadata(tmp_path / "b" / "model.onnx")
    assert (meta["asrkit_snip_edges"], meta["asrkit_high_freq"], meta["asrkit_sample_scale"]) == ("false", "-400",
                                                                                                 "32768")
