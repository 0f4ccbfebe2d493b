"""Running the multi-node guide's blocks (docs/multinode.md) on namespaced hosts.

A node's script is the guide's ``settings`` block, then the test's values
(``master_addr`` = host 0's address, a port, toy options), then the named blocks, all
verbatim, run by ``bash`` inside the host's namespace in the shared recipe directory.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time

from tests.examples.test_multinode_guide import BLOCKS, TOY, run_env

PORT = 29500  # every host has its own network stack: the guide's port is free there


def toy_opts(exp: str, *more: str) -> list[str]:
    """The guide test's toy options with the experiment directory ``exp``."""
    return [*TOY, "--dir", exp, *more]


def node_script(*blocks: str, master_addr: str, opts: list[str], port: int = PORT, before: str = "") -> str:
    values = (f"master_addr={master_addr}\nmaster_port={port}\n"
              f"opts=({' '.join(shlex.quote(o) for o in opts)})\n")
    return "set -euo pipefail\n" + BLOCKS["settings"] + values + before + "".join(BLOCKS[b] for b in blocks)


def start_node(host, script: str, cwd, **env) -> subprocess.Popen:
    """``bash -c script`` on ``host`` in its own process group, output captured."""
    return host.popen(["bash", "-c", script], cwd=cwd, env=run_env(**env), stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)


def wait_nodes(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each node; every process group is killed when the
    ``timeout`` (for all of them together) passes, and then too the output is returned
    (exit status -9)."""
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                out, err = p.communicate()
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    return results
