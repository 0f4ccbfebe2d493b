"""The "Multi-node training guide" (docs/multinode.md), run as written.

Its ``<!-- guide:NAME -->`` bash blocks run verbatim in a copy of the digits recipe under a
path with spaces.  Only the values of the settings block are replaced (after it runs):
``master_addr=127.0.0.1``, a free port, and toy options.  Two "nodes" are two processes on
localhost (gloo), each running the interface block and then its own launch block; the
SLURM block runs ``tools/slurm_train.sh`` through stub ``sbatch``/``srun``/``scontrol``
executables that set the SLURM variables as SLURM does, so the script's own rank and
master derivation is what forms the job.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.examples.multinode_guide import EXP, RECIPE, TOY, bash, finish, guide_script, run_env, start
from tests.helpers import REPO, free_port

pytestmark = pytest.mark.slow


class Log:
    """The text a rank log gained since it was opened (rank logs are appended to)."""

    def __init__(self, path: Path):
        self.path, self.start = path, path.stat().st_size if path.exists() else 0

    def new(self) -> str:
        with open(self.path, encoding="utf-8") as f:
            f.seek(self.start)
            return f.read()


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("guide") / "node disks" / "digits s0"
    root.mkdir(parents=True)
    for name in ("run.sh", "path.sh", "conf"):
        src = RECIPE / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


@pytest.fixture(scope="module")
def two_nodes(recipe):
    """Steps 1-3 of the guide: prepare, then the interface and launch blocks on two nodes."""
    t0 = time.monotonic()
    bash(guide_script("prepare", port=0, opts=TOY), recipe)
    port = free_port()
    opts = TOY + ["--train_overrides", "max_epoch=1"]
    outs = finish([start(guide_script("interface", f"node{k}", port=port, opts=opts), recipe) for k in (0, 1)])
    return {"outs": outs, "seconds": time.monotonic() - t0}


def test_guide_prepare_and_two_node_launch(recipe, two_nodes):
    exp = recipe / EXP
    (out0, err0), (out1, err1) = two_nodes["outs"]
    assert out0.strip() == out1.strip() == "lo"  # the interface block's echo
    log0, log1 = (exp / "log" / "rank0.log").read_text(), (exp / "log" / "rank1.log").read_text()
    for rank, log in ((0, log0), (1, log1)):
        assert (f"backend gloo, world size 2 (2 node(s) x 1), rank {rank}, local rank 0" in log
                and "NCCL_SOCKET_IFNAME=lo, GLOO_SOCKET_IFNAME=lo" in log), log[:2000]
        assert "agreement: the 2 ranks have the same config (less launch)" in log
        assert "training finished at epoch 1, step 4" in log
    assert "(2 node(s) x 1 process(es), node_rank 0)" in err0 and "node_rank 1)" in err1
    assert "training finished" in err0  # rank 0 logs to node 0's terminal
    assert (exp / "epoch_0.pt").is_file() and not (exp / "epoch_1.pt").exists()
    for f in ("data/train/data.list", "data/dev/data.list", "data/dict/units.txt", "data/train/global_cmvn"):
        assert (recipe / f).stat().st_size > 0


STUB_SBATCH = r"""#!/usr/bin/env bash
# stub sbatch: runs the script at once, in the foreground, with the batch step's SLURM variables
nodes=1
while [ $# -gt 0 ] && [[ $1 == -* ]]; do
  case $1 in --nodes=*) nodes=${1#*=} ;; --nodes|-N) nodes=$2; shift ;; esac; shift
done
script=$1; shift
export SLURM_JOB_ID=4242 SLURM_NNODES=$nodes SLURM_NODEID=0 SLURM_PROCID=0 SLURM_SUBMIT_DIR=$PWD
export SLURM_JOB_NODELIST=$STUB_NODELIST
exec bash "$script" "$@"
"""
STUB_SRUN = r"""#!/usr/bin/env bash
# stub srun: one task per node of the allocation, SLURM's per-task variables set
echo "srun $*" >> "$STUB_LOG"
while [ $# -gt 0 ] && [[ $1 == -* ]]; do shift; done
pids=()
for ((i = 0; i < SLURM_NNODES; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_NTASKS=$SLURM_NNODES "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
"""
STUB_SCONTROL = r"""#!/usr/bin/env bash
# stub scontrol: "show hostnames LIST" for a comma-separated LIST
[ "$1 $2" = "show hostnames" ] || { echo "stub scontrol: unsupported: $*" >&2; exit 1; }
echo "scontrol $*" >> "$STUB_LOG"
tr ',' '\n' <<< "$3"
"""


def test_guide_slurm_script_resumes_and_restarts(recipe, two_nodes, tmp_path):
    """Step 4 resubmits the job through tools/slurm_train.sh: it continues step 3's run
    (step 5); rank 1 is killed in the middle of epoch 1 and torchrun restarts both nodes
    (the script's max_restarts 1), which resume again from the epoch checkpoint."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in (("sbatch", STUB_SBATCH), ("srun", STUB_SRUN), ("scontrol", STUB_SCONTROL)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    log0, log1 = Log(recipe / EXP / "log" / "rank0.log"), Log(recipe / EXP / "log" / "rank1.log")
    port = free_port()  # (the script's default, 20000 + job id % 20000, may be taken here)
    env = run_env(PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}", STUB_LOG=str(tmp_path / "stub.log"),
                  STUB_NODELIST="localhost,127.0.0.1", master_port=str(port),
                  ASRKIT_HOOK_KILL="1:6", PYTHONPATH=f"{REPO / 'tests' / 'fault_site'}{os.pathsep}{REPO}")
    _, err = bash(guide_script("slurm", port=port, opts=TOY), recipe, env)
    calls = (tmp_path / "stub.log").read_text()
    assert "scontrol show hostnames localhost,127.0.0.1" in calls
    assert re.search(r"^srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c ", calls, re.M), calls
    assert f"2 node(s) (localhost 127.0.0.1), master localhost:{port}" in err
    assert "data/train/global_cmvn exists, statistics of these features: kept" in err  # prepare=once, idempotent
    new0, new1 = log0.new(), log1.new()
    assert "rank 1 kills itself with SIGKILL now" in new1
    assert re.search(r"rank 0 \(host \S+\): a collective failed after [\d.]+ s while .* of epoch 1 .*"
                     r"Connection (closed|reset) by peer", new0), new0  # gloo words it either way
    for rank, log in ((0, new0), (1, new1)):
        assert log.count(f"world size 2 (2 node(s) x 1), rank {rank},") == 2, log[:3000]
        assert log.count(f"resumed from {EXP}/epoch_0.pt: epoch 1, step 4") == 2
        assert log.count("training finished at epoch 2, step 8") == 1
    assert (recipe / EXP / "epoch_1.pt").is_file()


def test_guide_one_node_keeps_global_batch(recipe, two_nodes):
    """Step 6: the job restarted on one node with reference_world_size 2."""
    log0 = Log(recipe / EXP / "log" / "rank0.log")
    opts = TOY + ["--train_overrides", "reference_world_size=2 keep_global_batch=true"]
    bash(guide_script("one-node", port=0, opts=opts), recipe)
    new = log0.new()
    assert "world size 1 (1 node(s) x 1)" in new, new[:2000]
    assert re.search(rf"resumed from {EXP}/epoch_\d\.pt", new)
    assert "the checkpoint holds the RNG states of 2 rank(s), this run has 1" in new
    assert ("world-size scaling: keep_global_batch: the reference (2 rank(s) x accum_grad 1) sums 2 per-rank "
            "batches per optimizer step; on 1 rank(s) accum_grad 1 -> 2: the same global batch") in new
    assert "accum_grad 2; world size 1" in new
    assert "training finished at epoch 2, step 8" in new


def test_guide_failure_messages_are_what_asrkit_prints(tmp_path, monkeypatch):
    """Step 7 quotes asrkit's refusals as the code words them."""
    from asrkit.train.agreement import disagreement_message, fingerprint
    guide_page = (REPO / "docs" / "multinode.md").read_text(encoding="utf-8")
    guide = re.search(r"^## Multi-node training guide\n(.*?)(?=^## |\Z)", guide_page, re.S | re.M).group(1)
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| ([^|]+?) \| (.+?) \| [^|]+ \|$", guide, re.M)}

    # data prepared differently: node 1's list lost its last line
    text = "".join(f'{{"key": "u{i}", "wav": "/data/u{i}.wav", "txt": "one", "duration": 1.0}}\n' for i in range(3))
    prints = []
    for rank, content in enumerate((text, text[:text.rindex("{")])):
        (tmp_path / f"n{rank}" / "data" / "train").mkdir(parents=True)
        (tmp_path / f"n{rank}" / "data" / "train" / "data.list").write_text(content)
        monkeypatch.chdir(tmp_path / f"n{rank}")
        prints.append(dict(fingerprint({"a": 1}, {"train data list": "data/train/data.list"}), rank=rank,
                           host=f"n{rank}"))
    head, detail = disagreement_message([prints[0], prints[1]]).splitlines()[:2]
    row = rows["data prepared differently on one node"]
    assert f"`{head}`" in row
    pattern = r"sha256 [0-9a-f]{12}, \d+ bytes".join(map(re.escape, re.split(r"sha256 \w+, \d+ bytes",
                                                                           detail.strip())))
    assert re.search(f"`{pattern}`", row), (detail, row)

    sources = "".join(p.read_text() for p in (REPO / "asrkit").rglob("*.py"))
    for fragment in ("ranks disagree on {what}; refusing to start", "the checkpoint to resume from",
                     "every rank must resume from the same checkpoint: with --checkpoint auto on several",
                     "model_dir must be on a shared filesystem (or copy the checkpoint to each node)",
                     "cannot start training:", 'f"error: {e}"', ": file not found", "a collective failed after"):
        assert fragment in sources, fragment
    row = rows["checkpoints only on node 0's disk"]
    assert "`ranks disagree on the checkpoint to resume from; refusing to start:`" in row
    assert "model_dir must be on a shared filesystem (or copy the checkpoint to each node)" in row
    row = rows["a file missing on one node"]
    assert "`error: cannot start training:`" in row and "`--train_data data/train/data.list: file not found`" in row
    row = rows["a node dies (killed, out of memory, hardware)"]
    assert "a collective failed after" in row and "Connection closed by peer" in row
