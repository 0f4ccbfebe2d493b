"""bench/network_cost.py on tiny settings: the tests' tiny conformer, 2 namespaced hosts on a
shaped link, one hook, 2 steps.  What the bench reports must agree with what the test knows
on its own: the gradient's size (counted here from the model), what the hook sends (half of
it for fp16), frames on the wire at least that payload, and nothing left behind (no ``ak*``
namespace, no process).  Skipped where network namespaces cannot be made (not root, no
``ip``/``tc``)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO, repo_env, tiny_config_dict

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # (~20 s; the full run's output: docs/experiments/network_cost_epyc.md)


@pytest.fixture(scope="module")
def netns_hosts():
    from tools import netns_hosts as module
    ok, why = module.netns_available()
    if not ok:
        pytest.skip(f"network namespaces unavailable: {why}")
    return module


def test_tiny_bench_on_two_hosts(netns_hosts, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config_dict(
        dataset_conf={"fbank_conf": {"num_mel_bins": 40, "dither": 0.0}, "speed_perturb": False,
                      "spec_aug": False})))
    out_json, out_md = tmp_path / "nc.json", tmp_path / "nc.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "network_cost.py"), "--config", str(config), "--work", str(tmp_path),
         "--train_utts", "8", "--dev_utts", "2", "--batch", "2", "--rates", "100mbit", "--hooks", "fp16",
         "--loopback_hooks", "--no_alone", "--steps", "1", "--warmup", "1", "--timeout", "120",
         "--json", str(out_json), "--markdown", str(out_md)],
        capture_output=True, text=True, cwd=REPO, env=repo_env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out_json.read_text())
    (row,) = result["rows"]
    assert (row["setting"], row["hook"], row["world"], row["nodes"]) == ("100mbit", "fp16", 2, 2)

    from asrkit.config import TrainConfig

    from asrkit.schema import build
    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    units = len((tmp_path / "corpus_8_2" / "units.txt").read_text().splitlines())
    model = build_model(build(TrainConfig, yaml.safe_load(config.read_text())), 40, Vocabulary.of_size(units),
                        load_cmvn_stats=False)
    n = sum(p.numel() for p in model.parameters())
    assert row["grad_elements"] == n and row["payload_bytes_per_step"] == 2 * n
    assert row["tx_bytes_per_step"] >= row["payload_bytes_per_step"]
    # (one timed step: the all-reduce share is noise here, it may even come out negative)
    assert 0 < row["allreduce_MBps"] and row["allreduce_share"] < 1 and row["cv_loss"] > 0
    assert "| 100mbit | fp16 |" in out_md.read_text() and result["command"].startswith("python bench/network_cost.py")
    assert not netns_hosts.leftovers(ignore_live=True)
