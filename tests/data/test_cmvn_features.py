"""CMVN files record the filterbank they are of; training refuses statistics of other
features, the recipes' stage 1 keeps a file of the same features and refuses another's."""
import json

import pytest
import torch

from asrkit.config import load_config
from asrkit.data.features import CmvnError, CmvnStats, feature_record, load_cmvn, recorded_features, write_cmvn
from asrkit.config_files import load_model_inputs
from tests.helpers import run_tool
from tools.compute_cmvn_stats import keep_existing


def _stats(dim=40):
    stats = CmvnStats(dim)
    stats.add(torch.arange(3 * dim, dtype=torch.float32).reshape(3, dim))
    return stats


def test_record_written_and_checked(tmp_path, tiny_experiment):
    cfg = load_config(tiny_experiment.config(tmp_path / "a.yaml"))
    features = feature_record(cfg.dataset_conf)
    assert features == {"sample_rate": 16000, "num_mel_bins": 40, "frame_length": 25.0, "frame_shift": 10.0,
                        "snip_edges": True, "high_freq": 0.0, "sample_scale": 32768.0}
    write_cmvn(tmp_path / "c.json", _stats(), features)
    assert json.loads((tmp_path / "c.json").read_text())["asrkit_features"] == features == recorded_features(tmp_path / "c.json")
    load_cmvn(tmp_path / "c.json", 40, features)  # the same features: accepted
    other = dict(features, snip_edges=False, high_freq=-400.0)
    with pytest.raises(CmvnError, match="other features .snip_edges false here, true in the file; high_freq -400 "
                                        "here, 0 in the file"):
        load_cmvn(tmp_path / "c.json", 40, other)
    write_cmvn(tmp_path / "wenet.json", _stats())  # WeNet's layout, no record: taken as it is
    assert recorded_features(tmp_path / "wenet.json") is None
    load_cmvn(tmp_path / "wenet.json", 40, other)


def test_training_inputs_refuse_other_features(tmp_path, tiny_experiment):
    """The trainer's inputs (both the model layer's and dataset_conf's CMVN file) are checked
    against the config's filterbank: the tiny experiment's statistics are of WeNet's fbank."""
    same = load_config(tiny_experiment.config(tmp_path / "same.yaml"))
    assert load_model_inputs(same, model_cmvn=True).model_cmvn is not None
    other = load_config(tiny_experiment.config(tmp_path / "other.yaml", dataset_conf={
        "fbank_conf": {"num_mel_bins": 40, "dither": 0.0, "snip_edges": False}}))
    with pytest.raises(CmvnError, match="snip_edges false here, true in the file"):
        load_model_inputs(other, model_cmvn=True)
    data_side = load_config(tiny_experiment.config(tmp_path / "data.yaml", cmvn=None, dataset_conf={
        "cmvn_file": str(tiny_experiment.cmvn), "fbank_conf": {"num_mel_bins": 40, "dither": 0.0, "high_freq": -400}}))
    with pytest.raises(CmvnError, match="high_freq -400 here, 0 in the file"):
        load_model_inputs(data_side, model_cmvn=True)


def test_keep_existing(tmp_path, tiny_experiment, capsys):
    """Stage 1's rule: the same features' file is kept (not recomputed: its content stays),
    another's or an unrecorded one is one error line with exit status 2 (the tool's run end
    to end once)."""
    same = load_config(tiny_experiment.config(tmp_path / "same.yaml"))
    other = tiny_experiment.config(tmp_path / "other.yaml", dataset_conf={
        "fbank_conf": {"num_mel_bins": 40, "dither": 0.0, "snip_edges": False}})
    out = tmp_path / "global_cmvn"
    stats = json.loads(tiny_experiment.cmvn.read_text())
    stats["frame_num"] += 1  # a marker a recomputation would lose
    out.write_text(json.dumps(stats))
    assert keep_existing(out, feature_record(same.dataset_conf)) == 0
    assert json.loads(out.read_text())["frame_num"] == stats["frame_num"]
    refused = run_tool("compute_cmvn_stats.py", "--train_config", other, "--in_scp", "/nonexistent/wav.scp",
                       "--out_cmvn", out, "--keep_existing", check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "other features (snip_edges false here, true in the file)" in refused.stderr
    write_cmvn(out, _stats())
    assert keep_existing(out, feature_record(same.dataset_conf)) == 2
    assert "records no features" in capsys.readouterr().err
