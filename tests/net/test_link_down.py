"""A node whose link goes down in the middle of training (docs/multinode.md, failures
table): the job stops within ``launch.timeout_s`` with messages naming the ranks and their
hosts, and after the link is back the same commands resume exactly where the last
checkpoint left off (``--checkpoint auto``, run.sh's default).

Rank 1 pauses right after optimizer step 3 (``ASRKIT_HOOK_PAUSE``, tests/fault_site), the
test unplugs host 1 at the switch, then lets rank 1 go on: both ranks then wait in step 4's
all-reduce for packets that never arrive.  ``save_interval: 2`` wrote ``step_2.pt``."""
from __future__ import annotations

import re
import time

import pytest

from tests.helpers import REPO
from tests.net.nodes import Node, node_script, toy_opts, wait_nodes
from tests.reliability.common import steps_logged

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # (~60 s: two launches; docs/experiments/netns_link_down.md)
TIMEOUT_S = 8


def test_link_down_stops_within_timeout_and_resumes(hosts2, net_recipe, tmp_path):
    h0, h1 = hosts2.hosts
    exp = "exp/link down"
    opts = toy_opts(exp, "--train_overrides",
                    f"max_epoch=1 save_interval=2 log_interval=1 launch.timeout_s={TIMEOUT_S}")
    go = tmp_path / "go"
    hook = dict(ASRKIT_HOOK_PAUSE=f"1:3:{go}", PYTHONPATH=f"{REPO / 'tests' / 'fault_site'}:{REPO}")
    scripts = [node_script("interface", f"node{k}", master_addr=h0.addr, opts=opts) for k in (0, 1)]
    procs = [Node(h, s, net_recipe, tmp_path / "run1", **hook) for h, s in zip((h0, h1), scripts)]
    deadline = time.monotonic() + 120
    while not (tmp_path / "go.reached").exists():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            results = wait_nodes(procs, timeout=5)
            pytest.fail(f"rank 1 never reached step 3: {[(c, e[-3000:]) for c, _, e in results]}")
        time.sleep(0.1)
    hosts2.link_down(1)
    go.touch()
    t0 = time.monotonic()
    results = wait_nodes(procs, timeout=TIMEOUT_S + 60)
    stopped_after = time.monotonic() - t0
    assert all(code not in (0, -9) for code, _, _ in results), [(c, e[-2000:]) for c, _, e in results]
    log0 = (net_recipe / exp / "log" / "rank0.log").read_text()
    log1 = (net_recipe / exp / "log" / "rank1.log").read_text()
    for rank, host, log in ((0, h0, log0), (1, h1, log1)):
        assert re.search(rf"rank {rank} \(host {host.name}\): a collective failed after [\d.]+ s while .*"
                         rf"\(launch.timeout_s {TIMEOUT_S}\)", log), log[-3000:]
    assert steps_logged(log0) == [1, 2, 3]
    # rank 1 cannot read rank 0's status: the store is on node 0, behind the dead link
    assert re.search(r"rank 0: status unreadable \(no answer from the store within [\d.]+ s\)", log1), log1[-2000:]
    for k, (_, _, err) in enumerate(results):  # each node's terminal shows its rank's line
        assert f"rank {k} (host {(h0, h1)[k].name}): a collective failed after" in err, err[-3000:]
    print(f"job ended {stopped_after:.1f} s after the link went down (launch.timeout_s {TIMEOUT_S})")
    assert stopped_after < TIMEOUT_S + 45  # (a timeout, not a hang; generous for 2 busy cores)

    hosts2.link_up(1)
    results = wait_nodes([Node(h, s, net_recipe, tmp_path / "run2") for h, s in zip((h0, h1), scripts)],
                         timeout=120)
    for k, (code, out, err) in enumerate(results):
        assert code == 0, f"node {k} failed to resume ({code}):\n{err[-4000:]}"
    for path in ("rank0.log", "rank1.log"):
        log = (net_recipe / exp / "log" / path).read_text()
        second = log[log.rindex("launch via torchrun"):]
        assert f"resumed from {exp}/step_2.pt: epoch 0, step 2 (mid-epoch)" in second, second[:3000]
        assert steps_logged(second) == [3, 4]
        assert "training finished at epoch 1, step 4" in second
