"""The master cannot be reached (docs/multinode.md, failures table): with the recipe's
``--rdzv_timeout`` a node gives up within that time, with one line naming the address, the
port, what went wrong and the fixes -- instead of torchrun's default 900 s wait.

Node 1 runs the guide's interface and launch blocks unchanged, with ``--rdzv_timeout`` in
the options; host 0 either runs nothing ("node 0 not started": refused) or has its link
down (a wrong or dead address: no answer).  Node 0 alone shows that torchrun itself gets the
timeout (its rendezvous waits that long for the other nodes)."""
from __future__ import annotations

import re
import time

import pytest

from tests.net.nodes import Node, node_script, toy_opts, wait_nodes

RDZV_TIMEOUT = 3


@pytest.mark.parametrize("master_state, last_attempt", [
    ("not started", "Connection refused"),
    ("link down", "(No route to host|no answer)"),
])
def test_node_gives_up_on_unreachable_master(hosts2, net_recipe, tmp_path, master_state, last_attempt):
    h0, h1 = hosts2.hosts
    if master_state == "link down":
        hosts2.link_down(0)
    opts = toy_opts("exp/unreachable", "--rdzv_timeout", str(RDZV_TIMEOUT))
    t0 = time.monotonic()
    [(code, out, err)] = wait_nodes([Node(h1, node_script("interface", "node1", master_addr=h0.addr, opts=opts),
                                          net_recipe, tmp_path)], timeout=RDZV_TIMEOUT + 60)
    took = time.monotonic() - t0
    assert code == 2, (code, err[-3000:])
    line = err.strip().splitlines()[-1]
    assert re.fullmatch(rf"error: node 1 cannot reach the master: {re.escape(h0.addr)} port 29500 did not accept a "
                        rf"connection within {RDZV_TIMEOUT} s \(last attempt: {last_attempt}.*\): check "
                        rf"--master_addr/--master_port .* --rdzv_timeout SECONDS waits longer", line), line
    assert "torch" not in err  # it gave up before torchrun started
    assert RDZV_TIMEOUT <= took < RDZV_TIMEOUT + 30, took


def test_master_alone_stops_after_rdzv_timeout(hosts2, net_recipe, tmp_path):
    h0, _ = hosts2.hosts
    opts = toy_opts("exp/alone", "--rdzv_timeout", str(RDZV_TIMEOUT))
    [(code, out, err)] = wait_nodes([Node(h0, node_script("node0", master_addr=h0.addr, opts=opts), net_recipe,
                                          tmp_path)], timeout=RDZV_TIMEOUT + 60)
    assert code != 0
    assert re.search(r"Timed out after \d+ seconds waiting for clients\. 1/2 clients joined", err), err[-3000:]
