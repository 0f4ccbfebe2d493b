"""The doctor's checks one by one, in-process (no process group, no subprocess)."""
from __future__ import annotations

import re
import socket

import pytest

from asrkit.doctor import network, port, rendezvous, results, versions, waiting
from asrkit.doctor.allreduce import bus_bandwidth
from tests.helpers import free_port


def test_result_line_and_exit_status():
    line = results.fail("files", "a\n  b", "fix it").line()
    assert line == "FAIL files: a; b -> fix it"
    assert results.ok("x", "fine").line() == "OK x: fine"
    assert results.exit_status([results.ok("x", ""), results.warn("y", "")]) == 0
    assert results.exit_status([results.ok("x", ""), results.fail("y", "")]) == 2
    with pytest.raises(ValueError):
        results.CheckResult("x", "MAYBE", "")


def test_bus_bandwidth_of_a_ring_all_reduce():
    assert bus_bandwidth(64, 1.0, 2) == pytest.approx(64)  # two nodes: each sends the whole buffer once
    assert bus_bandwidth(64, 1.0, 4) == pytest.approx(96)  # 2 (n - 1) / n of it with four


def test_versions_refuse_nccl_without_a_gpu():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: nccl is usable")
    lines = versions.check_versions("nccl")
    assert lines[0].status == "OK" and "torch " in lines[0].what
    [bad] = [r for r in lines if r.failed]
    assert bad.what.startswith("launch.dist_backend nccl: dist_backend nccl needs CUDA GPUs")
    assert bad.fix == "set launch.dist_backend: auto (nccl with GPUs, gloo without)"


def test_port_in_use_on_node_0_names_the_port():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        [line] = port.check_port_free("127.0.0.1", busy)
    assert line.failed and line.what == f"port {busy} is in use on this host (another job, or a torchrun still running)"
    assert f"ss -ltnp 'sport = :{busy}'" in line.fix


def test_master_address_not_on_node_0():
    [line] = port.check_port_free("198.51.100.7", free_port())  # (TEST-NET-2: no host here has it)
    assert line.failed
    assert line.what.startswith("master_addr 198.51.100.7 (198.51.100.7) is not an address of this host")


def test_master_address_that_does_not_resolve():
    [line] = port.wait_port_reachable("no-such-host.invalid", free_port(), 1.0)
    assert line.failed and line.what == "master address 'no-such-host.invalid' does not resolve on this host"


def test_a_loopback_master_is_a_warning_only_with_several_nodes():
    assert port.check_master_address("127.0.0.1", 1) == []
    [line] = port.check_master_address("localhost", 2)
    assert line.status == "WARN" and line.what.startswith("master_addr localhost is a loopback address")
    assert port.check_master_address("198.51.100.7", 2) == []


def test_the_master_comes_from_the_options_then_the_environment_then_torchruns_defaults():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29600"}
    assert port.master_endpoint(None, None, env) == ("10.0.0.1", 29600)
    assert port.master_endpoint("10.0.0.9", 29700, env) == ("10.0.0.9", 29700)
    assert port.master_endpoint(None, None, {}) == ("127.0.0.1", 29500)
    with pytest.raises(port.EndpointError, match="MASTER_PORT='x29' in the environment is not a port number"):
        port.master_endpoint("10.0.0.1", None, {"MASTER_PORT": "x29"})


def test_the_wait_for_node_0_prints_its_progress(capsys, monkeypatch):
    """A line every ``every_s`` (10 s in the doctor; 0.4 s here) while nothing listens."""
    monkeypatch.setattr(port, "WaitProgress", lambda what, timeout_s: waiting.WaitProgress(what, timeout_s, 0.4))
    p = free_port()
    [line] = port.wait_port_reachable("127.0.0.1", p, 1.0)
    assert line.failed
    progress = capsys.readouterr().err.splitlines()
    pattern = rf"doctor: waiting for node 0 to listen at 127\.0\.0\.1:{p}: \d s of at most 1 s \(last attempt: " \
              rf"Connection refused\)"
    assert 1 <= len(progress) <= 3 and all(re.fullmatch(pattern, text) for text in progress), progress


@pytest.mark.parametrize("resolved, expected", [
    (None, "FAIL network: GLOO_SOCKET_IFNAME is unset and this host's name node7 does not resolve"),
    ("127.0.1.1", "FAIL network: GLOO_SOCKET_IFNAME is unset and this host's name node7 resolves to 127.0.1.1 "
                  "(a loopback address)"),
    ("10.1.0.7", "WARN network: GLOO_SOCKET_IFNAME is unset: gloo listens on 10.1.0.7 (docker0"),
    ("10.0.0.7", "OK network: GLOO_SOCKET_IFNAME is unset: gloo listens on 10.0.0.7 (eth0"),
])
def test_gloo_default_device_address(monkeypatch, resolved, expected):
    monkeypatch.setattr(network.socket, "gethostname", lambda: "node7")
    monkeypatch.setattr(network, "hostname_address", lambda host=None: resolved)
    addresses = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.7"], "docker0": ["10.1.0.7"]}
    line = network.check_gloo_default(addresses, "eth0").line()
    assert line.startswith(expected), line
    if not line.startswith("OK"):
        assert line.endswith("-> export GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 "
                             "(on this node, before the recipe)")


def test_gloo_device_problem_is_the_reason_only():
    assert rendezvous.gloo_device_problem({"GLOO_SOCKET_IFNAME": "lo"}) == ""
    assert rendezvous.gloo_device_problem({"GLOO_SOCKET_IFNAME": "lo,akbogus0"}) == \
        "Unable to find address for: akbogus0"


def _facts(rank: int, config: dict | None, torch_version: str = "2.14.1") -> rendezvous.NodeFacts:
    facts = rendezvous.make_facts(rank, config, {"train data list": None}, {"torch version": torch_version},
                                  problem="" if config else "config file not found: conf/x.yaml")
    facts.host = f"node{rank}"
    return rendezvous.NodeFacts.from_json(facts.to_json())  # (as read back from the store)


def test_compare_facts_names_the_node_and_what_differs():
    config = {"max_epoch": 2, "launch": {"timeout_s": 60}}
    same = rendezvous.compare_facts([_facts(0, config), _facts(1, {**config, "launch": {"timeout_s": 30}})])
    assert [r.line() for r in same] == ["OK agreement: the 2 node(s) have the same torch version 2.14.1, "
                                        "config (less launch)"]
    [line] = rendezvous.compare_facts([_facts(0, config), _facts(1, {**config, "max_epoch": 3}, "2.5.0")])
    assert line.line().startswith("FAIL agreement: node 1 (host node1) differs from node 0 (host node0) in: config key "
                                  "max_epoch (rank 1: 3, rank 0: 2); torch version (rank 1: \"2.5.0\", "
                                  "rank 0: \"2.14.1\") -> install the same torch and asrkit"), line.line()
    lines = rendezvous.compare_facts([_facts(0, config), _facts(1, None, "2.5.0")], duplicates=[1])
    assert [r.what.split(":")[0] for r in lines] == [
        "node rank 1 was given to more than one node",
        "node 1 (host node1) differs from node 0 (host node0) in",
        "node 1 (host node1) could not load its config, so its config and files were not compared"]


def test_the_wait_for_the_other_nodes_prints_its_progress(capsys, monkeypatch):
    import torch.distributed as dist
    monkeypatch.setattr(rendezvous, "WaitProgress",
                        lambda what, timeout_s: waiting.WaitProgress(what, timeout_s, 0.4))
    store = dist.TCPStore("127.0.0.1", free_port(), 2, True, wait_for_workers=False)
    facts = rendezvous.make_facts(0, None, {}, {}, "no config")
    with pytest.raises(rendezvous.RendezvousError, match=r"^node\(s\) 1 of 2 did not check in within 1 s$"):
        rendezvous.exchange(store, facts, 2, 1.0)
    progress = capsys.readouterr().err.splitlines()
    pattern = (r"doctor: waiting for the other nodes to check in at node 0's store \(2 nodes\): \d s of at most 1 s "
               r"\(node\(s\) 1 not in yet\)")
    assert 1 <= len(progress) <= 3 and all(re.fullmatch(pattern, text) for text in progress), progress
