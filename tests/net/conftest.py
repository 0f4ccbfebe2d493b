"""Fixtures for tests that run "hosts" in Linux network namespaces (tools/netns_hosts.py).

* ``netns`` (session): the ``tools/netns_hosts.py`` module; every test using it is skipped
  with the reason when namespaces cannot be made here (not root, no ``ip``/``tc``).
* ``hosts2`` (function): two hosts on one unshaped switch; ``make_hosts(n, rate=None)``
  (function) makes as many sets as a test asks for.  All are removed when the test ends,
  pass or fail.
* ``net_recipe`` (session): a copy of ``examples/digits/s0`` (under a path with spaces)
  with the guide's toy data prepared once by the multi-node guide's own ``prepare`` block,
  on a filesystem every namespaced host shares.
* Leak check: when the session's last test that used these fixtures is torn down, no
  ``ak*`` namespace, root-namespace link or process started on a host may be left (other
  processes' live instances, e.g. a parallel xdist worker's, are not counted); a leak is an
  error of that teardown, so the session fails.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest



@pytest.fixture(scope="session")
def netns():
    from tools import netns_hosts as module
    ok, why = module.netns_available()
    if not ok:
        pytest.skip(f"network namespaces unavailable: {why}")
    yield module
    leaked = module.leftovers(ignore_live=True)
    leaked += [f"process {p.pid}: {' '.join(map(str, p.args))[:200]}" for p in module.all_started()]
    module.remove_leftovers(force=False)
    for proc in module.all_started():
        proc.kill()
    assert not leaked, f"network-namespace tests left behind: {leaked}"


@pytest.fixture
def make_hosts(netns):
    made = []

    def make(n: int = 2, rate=None):
        hosts = netns.Hosts(n, rate=rate)
        made.append(hosts)
        return hosts.open()

    yield make
    for hosts in made:
        hosts.close()


@pytest.fixture
def hosts2(make_hosts):
    return make_hosts(2)


@pytest.fixture(scope="session")
def net_recipe(tmp_path_factory, netns) -> Path:
    from tests.examples.multinode_guide import BLOCKS, RECIPE, TOY, bash
    root = tmp_path_factory.mktemp("net") / "shared disk" / "digits s0"
    root.mkdir(parents=True)
    for name in ("run.sh", "path.sh", "conf"):
        src = RECIPE / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    opts = " ".join(f"'{o}'" for o in TOY)
    bash("set -euo pipefail\n" + BLOCKS["settings"] + f"opts=({opts})\n" + BLOCKS["prepare"], root)
    return root
