"""The multi-node guide's launch (docs/multinode.md steps 2-3), unchanged, on two hosts
that are network namespaces: each runs the guide's interface block (which must find its
own ``eth0``, not ``lo``) and its launch block with ``master_addr`` = host 0's address;
torchrun's static rendezvous and gloo then cross the switch between them."""
from __future__ import annotations

import re

import pytest

from tests.net.nodes import Node, node_script, toy_opts, wait_nodes

# ~15 s alone (two torchrun agents and two trainers each import torch on 2 cores), ~30 s
# when other tests share the cores.
pytestmark = pytest.mark.slow


def test_guide_launch_on_two_namespaced_hosts(hosts2, net_recipe, tmp_path):
    h0, h1 = hosts2.hosts
    exp = "exp/on hosts"
    opts = toy_opts(exp, "--train_overrides", "max_epoch=1")
    procs = [Node(h, node_script("interface", f"node{k}", master_addr=h0.addr, opts=opts), net_recipe, tmp_path)
             for k, h in enumerate((h0, h1))]
    results = wait_nodes(procs, timeout=120)
    for k, (code, out, err) in enumerate(results):
        assert code == 0, f"node {k} failed ({code}):\n{out[-2000:]}\n{err[-5000:]}"
        assert out.strip() == "eth0"  # the interface block's echo, on node 0 too (not lo)
    for k, host in enumerate((h0, h1)):
        log = (net_recipe / exp / "log" / f"rank{k}.log").read_text()
        assert re.search(rf"world size 2 \(2 node\(s\) x 1\), rank {k}, local rank 0, device cpu, "
                         rf"host {host.name}, init env://; NCCL_SOCKET_IFNAME=eth0, GLOO_SOCKET_IFNAME=eth0", log), log
        assert "agreement: the 2 ranks have the same config (less launch)" in log
        assert "training finished at epoch 1, step 4" in log
    assert (net_recipe / exp / "epoch_0.pt").is_file()
