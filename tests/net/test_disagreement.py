"""A node prepared differently (docs/multinode.md step 1, failures table): node 1 works in
its own copy of the recipe (a node-local disk) whose train list lost a line, and was
started with another learning rate.  Both nodes run the guide's blocks unchanged on
namespaced hosts; the agreement preflight refuses to start on every rank (exit status 2)
and names node 1's host and both differences."""
from __future__ import annotations

import re
import shutil

import pytest

from tests.net.nodes import Node, node_script, toy_opts, wait_nodes

pytestmark = pytest.mark.slow  # two torchrun launches across the namespaces: ~15-30 s


def test_node_with_other_data_and_config_is_named(hosts2, net_recipe, tmp_path):
    h0, h1 = hosts2.hosts
    local = tmp_path / "node1 disk" / "digits s0"
    shutil.copytree(net_recipe, local, symlinks=True, ignore=shutil.ignore_patterns("exp"))
    train_list = local / "data" / "train" / "data.list"
    train_list.write_text("".join(train_list.read_text().splitlines(keepends=True)[:-1]))
    exp = "exp/disagree"
    opts0 = toy_opts(exp, "--train_overrides", "max_epoch=1")
    opts1 = toy_opts(exp, "--train_overrides", "max_epoch=1 optim_conf.lr=0.001")
    nodes = [Node(h0, node_script("interface", "node0", master_addr=h0.addr, opts=opts0), net_recipe, tmp_path),
             Node(h1, node_script("interface", "node1", master_addr=h0.addr, opts=opts1), local, tmp_path)]
    results = wait_nodes(nodes, timeout=120)
    log0 = (net_recipe / exp / "log" / "rank0.log").read_text()
    assert "ranks disagree on what must be identical in one job; refusing to start:" in log0, log0[-3000:]
    line = next(ln for ln in log0.splitlines() if "differs from rank 0" in ln)
    assert re.search(rf"rank 1 \(host {h1.name}\) differs from rank 0 \(host {h0.name}\) in: .*config", line), line
    assert re.search(r"train data list \(rank 1: data/train/data\.list \(sha256 \w+, \d+ bytes\); rank 0: "
                     r"data/train/data\.list", line), line
    assert all(code != 0 and code != -9 for code, _, _ in results), [(c, e[-1500:]) for c, _, e in results]
    assert not (net_recipe / exp / "epoch_0.pt").exists()
