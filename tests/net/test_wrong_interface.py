"""``GLOO_SOCKET_IFNAME`` naming an interface that does not exist, or one that exists but
does not carry the route to the master (a docker-like bridge), on a namespaced host: the
trainer refuses before joining the process group -- one line naming the variable, this
host's interfaces with their addresses and the interface the route to the master uses --
with exit status 2 (docs/multinode.md, failures table).

The trainer runs as torchrun starts it on node 1 of a 2-node job (torchrun's environment
variables set by hand): the check needs no peer, so one process shows it.  The right interface (eth0) is what test_guide_on_hosts trains with.
"""
from __future__ import annotations

import sys

import pytest

from tests.examples.multinode_guide import run_env
from tests.helpers import REPO


def add_stray_bridge(host) -> None:
    """A ``docker0``-like interface with an address that reaches nothing."""
    for argv in (["ip", "link", "add", "docker0", "type", "veth", "peer", "name", "docker0p"],
                 ["ip", "addr", "add", "198.19.255.1/24", "dev", "docker0"], ["ip", "link", "set", "docker0", "up"]):
        done = host.run(argv, timeout=10)
        assert done.returncode == 0, done.stderr


def train_as_node1(host, master, net_recipe, **env):
    torchrun_env = dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR=master,
                        MASTER_PORT="29500", TORCHELASTIC_RESTART_COUNT="0", **env)
    argv = [sys.executable, "-m", "asrkit.bin.train", "--config", "conf/train_toy.yaml", "--train_data",
            "data/train/data.list", "--cv_data", "data/dev/data.list", "--model_dir", "exp/wrong interface",
            "--override", "launch.timeout_s=10"]  # (were the check missing: a join that fails, not a hang)
    env = run_env(PYTHONPATH=str(REPO))  # (without the launch variables of this process)
    env.update(torchrun_env)
    return host.run(argv, env=env, cwd=net_recipe, timeout=60)


@pytest.mark.parametrize("ifname, complaint", [
    ("eth1", "GLOO_SOCKET_IFNAME=eth1 names no interface of this host with an address"),
    ("docker0", "GLOO_SOCKET_IFNAME=docker0 does not carry the route to the master {master}"),
])
def test_wrong_socket_interface_is_refused_before_training(hosts2, net_recipe, ifname, complaint):
    h0, h1 = hosts2.hosts
    add_stray_bridge(h1)
    done = train_as_node1(h1, h0.addr, net_recipe, GLOO_SOCKET_IFNAME=ifname)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    line = lines[0]
    assert line.startswith("error: " + complaint.format(master=h0.addr)), line
    assert f"interfaces of this host ({h1.name}): lo: 127.0.0.1 ::1, " in line
    assert f"eth0: {h1.addr}" in line and "docker0: 198.19.255.1" in line
    assert line.endswith(f"the route to the master {h0.addr} uses eth0: set GLOO_SOCKET_IFNAME=eth0"), line
    assert not (net_recipe / "exp" / "wrong interface" / "train.yaml").exists()  # refused before training

