"""Running the blocks of the "Multi-node training guide" (docs/multinode.md) verbatim:
the guide's ``<!-- guide:NAME -->`` bash blocks, a node's script (the settings block, the
test's values, then the named blocks) and running it with ``bash`` in its own process group.
Used by tests/examples/test_multinode_guide.py (nodes on localhost) and tests/net/
(nodes on namespaced hosts)."""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

from tests.helpers import REPO

RECIPE = REPO / "examples" / "digits" / "s0"
EXP = "exp/two nodes"
# The toy run: one training process of one thread per node, whatever the cores this test may
# use (the recipe's default is a process per core up to 2, threads filling the cores): the job
# the tests assert, and two nodes that share 2 cores without stalling each other.
TOY = ["--train_utts", "60", "--dev_utts", "12", "--test_utts", "12", "--train_config", "conf/train_toy.yaml",
       "--num_workers", "0", "--cpu_nproc_per_node", "1", "--num_threads", "1", "--dir", EXP,
       # (a few training rooms and noises, no hard test: stage 0's noise is tests/tools/test_make_noise_rooms.py's)
       "--train_rirs", "2", "--train_noises", "4", "--test_sets", "test",
       # (synthetic only: the steps the guide's checks count are the 60 utterances'; the real
       # speakers' path is tests/examples/test_digits_recipe.py's)
       "--real_speakers", ""]
TIMEOUT = 300


def guide_blocks() -> dict[str, str]:
    guide_page = (REPO / "docs" / "multinode.md").read_text(encoding="utf-8")
    section = re.search(r"^## Multi-node training guide\n(.*?)(?=^## |\Z)", guide_page, re.S | re.M)
    assert section, "docs/multinode.md has no '## Multi-node training guide' section"
    blocks = dict(re.findall(r"<!-- guide:([\w-]+) -->\s*```bash\n(.*?)```", section.group(1), re.S))
    assert {"settings", "prepare", "interface", "node0", "node1", "slurm", "one-node"} <= set(blocks), blocks
    return blocks


BLOCKS = guide_blocks()


def guide_script(*names: str, port: int, opts: list[str]) -> str:
    """The settings block, the test's values, then the named blocks, all verbatim."""
    values = (f"master_addr=127.0.0.1\nmaster_port={port}\n"
              f"opts=({' '.join(shlex.quote(o) for o in opts)})\n")
    return "set -euo pipefail\n" + BLOCKS["settings"] + values + "".join(BLOCKS[n] for n in names)


def run_env(**extra) -> dict:
    env = dict(os.environ, ASRKIT_ROOT=str(REPO), **extra)
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return env


def start(script: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """``bash -c script`` in its own process group (so a timeout ends torchrun and its workers too)."""
    return subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env or run_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(procs: list[subprocess.Popen]) -> list[tuple[str, str]]:
    """Wait for ``procs`` (killing every process group on a timeout); assert they succeeded."""
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=TIMEOUT))
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"failed ({p.returncode}):\n{out[-2000:]}\n{err[-6000:]}"
    return outs


def bash(script: str, cwd: Path, env: dict | None = None) -> tuple[str, str]:
    return finish([start(script, cwd, env)])[0]
