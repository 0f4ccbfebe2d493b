"""asrkit.train.dist.network without namespaces: parsing and the checks' decisions on given
interface tables (tests/net runs them on namespaced hosts)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from asrkit.train.dist import network as N
from tests.helpers import REPO

NODE1 = {"lo": ["127.0.0.1", "::1"], "eth0": ["10.1.0.2", "fe80::1"], "docker0": ["172.17.0.1"], "ib0": []}


def test_interface_addresses_of_this_host():
    addrs = N.interface_addresses()
    assert "127.0.0.1" in addrs["lo"]
    assert set(addrs) == {name for _, name in socket.if_nameindex()}
    assert N.route_interface("127.0.0.1", addrs) == "lo"


def test_route_to_an_own_address_is_the_interface_holding_it():
    assert N.route_interface("10.1.0.2", NODE1) == "eth0"
    assert N.route_interface("172.17.0.1", NODE1) == "docker0"


def test_describe_and_nccl_matching():
    assert N.describe_addresses(NODE1) == "lo: 127.0.0.1 ::1, eth0: 10.1.0.2, docker0: 172.17.0.1, ib0: (no address)"
    names = list(NODE1)
    assert N.nccl_matches("eth", names) == ["eth0"]
    assert N.nccl_matches("=eth", names) == []
    assert N.nccl_matches("^docker,lo", names) == ["eth0", "ib0"]
    assert N.nccl_matches("^=eth0", names) == ["lo", "docker0", "ib0"]


def test_master_host():
    env = {"MASTER_ADDR": "node0"}
    assert N.master_host("env://", env) == "node0"
    assert N.master_host("tcp://10.0.0.1:29500", {}) == "10.0.0.1"
    assert N.master_host("tcp://[fd00::1]:29500", {}) == "fd00::1"
    assert N.master_host("file:///shared/init", env) is None


@pytest.mark.parametrize("env, fragment", [
    ({"GLOO_SOCKET_IFNAME": "eth1"}, "GLOO_SOCKET_IFNAME=eth1 names no interface of this host with an address"),
    ({"GLOO_SOCKET_IFNAME": "ib0"}, "GLOO_SOCKET_IFNAME=ib0 names no interface of this host with an address"),
    ({"GLOO_SOCKET_IFNAME": "eth0,eth1"}, "GLOO_SOCKET_IFNAME=eth0,eth1 names eth1, not an interface"),
    ({"NCCL_SOCKET_IFNAME": "en"}, "NCCL_SOCKET_IFNAME=en selects no interface with an address"),
    ({"GLOO_SOCKET_IFNAME": "docker0"}, "GLOO_SOCKET_IFNAME=docker0 does not carry the route to the master 10.1.0.2"),
    ({"NCCL_SOCKET_IFNAME": "^eth"}, "NCCL_SOCKET_IFNAME=^eth does not carry the route to the master 10.1.0.2"),
])
def test_check_refuses_with_one_line(env, fragment):
    with pytest.raises(N.NetworkCheckError) as e:
        N.check_socket_ifname("10.1.0.2", env, multi_node=True, addresses=NODE1)
    msg = str(e.value)
    assert msg.startswith(fragment) and "\n" not in msg, msg
    assert "interfaces of this host" in msg and "eth0: 10.1.0.2" in msg
    var = fragment.split("=")[0]
    assert msg.endswith(f"the route to the master 10.1.0.2 uses eth0: set {var}=eth0"), msg


@pytest.mark.parametrize("env, kw", [
    ({"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth"}, {}),
    ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, {}),
    ({"GLOO_SOCKET_IFNAME": "docker0"}, {"multi_node": False}),  # one node: any interface with an address
    ({"GLOO_SOCKET_IFNAME": "eth1"}, {"backend": "nccl"}),  # gloo's variable is not used by nccl
    ({"NCCL_SOCKET_IFNAME": "eth1"}, {"backend": "gloo"}),
    ({}, {}),
])
def test_check_accepts(env, kw):
    N.check_socket_ifname("10.1.0.2", env, addresses=NODE1, **{"multi_node": True, **kw})


def test_loopback_master_is_not_held_against_the_interface():
    N.check_socket_ifname("127.0.0.1", {"GLOO_SOCKET_IFNAME": "lo"}, multi_node=True, addresses=NODE1)
    N.check_socket_ifname("127.0.0.1", {"GLOO_SOCKET_IFNAME": "eth0"}, multi_node=True, addresses=NODE1)


def test_multi_node_from_torchrun_environment():
    assert N.is_multi_node({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
    assert not N.is_multi_node({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})
    assert not N.is_multi_node({})


def test_wait_for_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert N.wait_for_port("127.0.0.1", server.getsockname()[1], timeout_s=5) < 5
        port = server.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(N.NetworkCheckError, match=rf"127.0.0.1 port {port} did not accept a connection within "
                                                  r"1 s \(last attempt: Connection refused\)"):
        N.wait_for_port("127.0.0.1", port, timeout_s=1, interval_s=0.2)
    assert time.monotonic() - t0 < 5


def test_wait_for_master_tool():
    tool = [sys.executable, str(REPO / "tools" / "wait_for_master.py")]
    own = subprocess.run([*tool, "--timeout", "1", "127.0.0.1", "1"], capture_output=True, text=True, timeout=30)
    assert own.returncode == 0  # this host's own address: it serves the rendezvous itself
    bad = subprocess.run([*tool, "--timeout", "1", "--node_rank", "1", "no-such-host.invalid", "29500"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("error: node 1 cannot reach the master: master address 'no-such-host.invalid' "
                                 "does not resolve on this host: check --master_addr"), bad.stderr
