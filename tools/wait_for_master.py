#!/usr/bin/env python3
"""Wait until the rendezvous master accepts TCP connections, before torchrun starts on a
node (called by ``stage_train`` in tools/recipe_stages.sh).

    python tools/wait_for_master.py --node_rank 1 --timeout 900 HOST PORT

Exit status 0 as soon as ``HOST:PORT`` accepts a connection, or at once when HOST is this
host's own address (it will serve the rendezvous itself); 2 with a one-line error naming
the address, the port, the last failure and the fixes when ``--timeout`` seconds pass
first (or HOST does not resolve).  Standard library only: it loads
``asrkit/train/dist/network.py`` by path, so no torch import delays the launch.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

_NETWORK = Path(__file__).resolve().parents[1] / "asrkit" / "train" / "dist" / "network.py"


def _network():
    spec = importlib.util.spec_from_file_location("asrkit_network", _NETWORK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="wait for the rendezvous master's port")
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--timeout", type=float, required=True, help="seconds (the recipe's --rdzv_timeout)")
    ap.add_argument("--node_rank", default="?")
    args = ap.parse_args(argv)
    net = _network()
    try:
        if net.is_local_address(args.host):
            return 0
        waited = net.wait_for_port(args.host, args.port, args.timeout)
    except net.NetworkCheckError as e:
        print(f"error: node {args.node_rank} cannot reach the master: {e}: check --master_addr/--master_port "
              f"(node 0's address and a free port there, the same on every node), that node 0 is started, "
              f"the route and firewall between the nodes (docs/multinode.md step 2); --rdzv_timeout SECONDS "
              f"waits longer", file=sys.stderr)
        return 2
    if waited > 1.0:
        print(f"node {args.node_rank}: the master {args.host}:{args.port} answered after {waited:.0f} s",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
