"""``asrkit doctor`` on two namespaced hosts (``tools/netns_hosts.py``): each host has its
own network stack (``lo`` and ``eth0`` with a 198.18.x.y address), the doctor runs inside
each with ``--master_addr <host 0's address>``, as on two real machines.

* the acceptance case: host 1's ``GLOO_SOCKET_IFNAME`` names an interface it does not have
  -> its report names the interface to use (``eth0``), and neither node waits for a gloo
  connection that cannot happen;
* both hosts set right: the all-reduce runs across the namespaces and is measured.

Uses the ``hosts2`` fixture (tests/net/conftest.py): skipped with the reason where root,
``ip``/``tc`` or network namespaces are missing; every namespace, link and process is
removed when the test ends, and the session's leak check covers these tests.
"""
from __future__ import annotations

import sys

import pytest

from tests.bin.doctor_helpers import FAST, JOB, doctor_env, lines_of, make_recipe
from tests.helpers import free_port

TIMEOUT = 120


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, tiny_corpus, tiny_experiment):
    return make_recipe(tmp_path_factory.mktemp("doctor_netns") / "digits s0", tiny_corpus, tiny_experiment)


def run_both(hosts, recipe, ifnames: list[str]) -> list[tuple[int, str, str]]:
    """The doctor on host 0 and host 1 at once (node rank = host index), with
    ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` from ``ifnames``; their (status, stdout, stderr)."""
    master, port = hosts.hosts[0].addr, free_port()
    procs = []
    for rank, (host, ifname) in enumerate(zip(hosts.hosts, ifnames)):
        argv = [sys.executable, "-m", "asrkit.bin.doctor", *JOB, "--num_nodes", "2",
                "--node_rank", str(rank), "--master_addr", master, "--master_port", str(port), "--timeout_s", "60",
                *FAST]
        env = doctor_env(GLOO_SOCKET_IFNAME=ifname, NCCL_SOCKET_IFNAME=ifname)
        procs.append(host.popen(argv, env=env, cwd=recipe, stdout=-1, stderr=-1, text=True))
    results = []
    for p in procs:  # (on a timeout the hosts' close kills what is left)
        out, err = p.communicate(timeout=TIMEOUT)
        results.append((p.returncode, out, err))
    return results


def test_wrong_interface_name_in_a_namespaced_host_prints_the_interface_to_use(hosts2, recipe):
    h0, h1 = hosts2.hosts
    (code0, out0, err0), (code1, out1, err1) = run_both(hosts2, recipe, [h0.iface, "eth9"])
    assert code1 == 2 and "Traceback" not in err1, out1 + err1
    [net] = [line for line in lines_of(out1, "FAIL") if line.startswith("FAIL network: ")]
    assert net.startswith("FAIL network: GLOO_SOCKET_IFNAME=eth9 names no interface of this host with an address"), net
    assert f"{h1.iface}: {h1.addr}" in net  # the addresses it saw
    assert net.endswith(f"-> export GLOO_SOCKET_IFNAME={h1.iface} NCCL_SOCKET_IFNAME={h1.iface} "
                        f"(on this node, before the recipe)"), net
    assert f"OK network: the route to the master {h0.addr} ({h0.addr}) uses {h1.iface} ({h1.addr})" in out1
    assert f"OK master port: {h0.addr}:" in out1 and " reachable (after " in out1
    # node 0 is fine itself, but both skip the all-reduce instead of waiting out the timeout
    assert code0 == 2 and lines_of(out0, "FAIL network") == [], out0 + err0
    for out in (out0, out1):
        assert "OK agreement: the 2 node(s) have the same" in out
        [allreduce] = [line for line in lines_of(out, "FAIL") if line.startswith("FAIL allreduce: ")]
        assert "not run: gloo cannot connect node 1 (host " in allreduce and "eth9" in allreduce, allreduce


def test_all_reduce_across_two_namespaced_hosts(hosts2, recipe):
    h0, h1 = hosts2.hosts
    results = run_both(hosts2, recipe, [h0.iface, h1.iface])
    for rank, (code, out, err) in enumerate(results):
        assert code == 0 and lines_of(out, "FAIL") == [] and lines_of(out, "WARN") == [], out + err
        assert f"GLOO_SOCKET_IFNAME={h0.iface}, NCCL_SOCKET_IFNAME={h0.iface}: interface(s) of this host carrying " \
               f"the route to the master" in out
        assert "OK allreduce: 2 nodes over gloo: latency " in out
    assert f"OK master port: {h0.addr}:" in results[0][1] and "is free on this host" in results[0][1]
    assert f"OK master port: {h0.addr}:" in results[1][1] and " reachable (after " in results[1][1]
