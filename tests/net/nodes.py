"""Running the multi-node guide's blocks (docs/multinode.md) on namespaced hosts.

A node's script is the guide's ``settings`` block, then the test's values
(``master_addr`` = host 0's address, a port, toy options), then the named blocks, all
verbatim, run by ``bash`` inside the host's namespace in the shared recipe directory.
Output goes to files (a process that outlives its node script, e.g. an orphaned torchrun
worker, then cannot hold a test's pipe open).
"""
from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

from tests.examples.multinode_guide import BLOCKS, TOY, run_env

PORT = 29500  # every host has its own network stack: the guide's port is free there


def toy_opts(exp: str, *more: str) -> list[str]:
    """The guide test's toy options with the experiment directory ``exp``."""
    return [*TOY, "--dir", exp, *more]


def node_script(*blocks: str, master_addr: str, opts: list[str], port: int = PORT, before: str = "") -> str:
    values = (f"master_addr={master_addr}\nmaster_port={port}\n"
              f"opts=({' '.join(shlex.quote(o) for o in opts)})\n")
    return "set -euo pipefail\n" + BLOCKS["settings"] + values + before + "".join(BLOCKS[b] for b in blocks)


class Node:
    """``bash -c script`` running on ``host`` in its own process group."""

    def __init__(self, host, script: str, cwd: Path, out_dir: Path, **env):
        self.host = host
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = f"{host.name}_{time.monotonic_ns()}"
        self.out_path, self.err_path = out_dir / f"{stamp}.out", out_dir / f"{stamp}.err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = host.popen(["bash", "-c", script], cwd=cwd, env=run_env(**env), stdout=out, stderr=err,
                                   stdin=subprocess.DEVNULL, text=True)

    def poll(self):
        return self.proc.poll()

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")


def wait_nodes(nodes: list[Node], timeout: float) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each node once all have ended; when ``timeout``
    (for all together) passes first, every process in the nodes' namespaces is killed and
    those still running report -9."""
    deadline = time.monotonic() + timeout
    try:
        for node in nodes:
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.host.kill_all()
    return [(n.proc.returncode, n.out, n.err) for n in nodes]
