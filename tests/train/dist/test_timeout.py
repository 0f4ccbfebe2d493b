"""No silent hang: a rank stuck in its data loader ends the job within ``launch.timeout_s``
with a message naming the rank and what it was doing.

Fault injection: the test hooks of ``tests.hooked_train`` (``--stall_rank r``) make rank
r's train loader hang forever before the first batch of the pass.
"""
from __future__ import annotations

import datetime
import re
import time

import pytest
import torch
import torch.distributed as dist

from asrkit.train import dist as D
from asrkit.train.dist.monitor import _first_line as first_line

from tests.helpers import fork_main, fork_server_context, forked_torchrun_args, free_port, random_batch, tiny_config_dict, train_args

TIMEOUT_S = 6


class _Batches:
    """A loader stand-in: 4 random batches of epoch 0."""

    epoch = 0

    def __len__(self):
        return 4

    def __iter__(self):
        gen = torch.Generator().manual_seed(0)
        for _ in range(4):
            yield random_batch(gen, 1, vocab=10, max_frames=20)


def _stall_worker(rank, port, timeout_s, queue, tmp):
    from asrkit.config import TrainConfig
    from asrkit.schema import build
    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    from asrkit.train.executor import Executor, TrainState
    from asrkit.train.scheduler import build_optimizer, build_scheduler
    from tests.hooked_train import install_stall
    install_stall(1, 0)  # rank 1's train loader hangs before its first batch
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=timeout_s))
    ctx = D.DistContext(rank=rank, world_size=2)
    monitor = D.RankMonitor.for_context(ctx, timeout_s)
    cfg = build(TrainConfig, tiny_config_dict())
    model = D.wrap_ddp(build_model(cfg, 80, Vocabulary.of_size(10)), ctx, find_unused_parameters=False)
    opt = build_optimizer(cfg, model.parameters())
    executor = Executor(cfg, model, opt, build_scheduler(cfg, opt), ctx, tmp, progress=False)
    start = time.monotonic()
    try:
        executor.train_epoch(D.MonitoredLoader(_Batches(), monitor, "train"), TrainState())
        queue.put((rank, "finished", "", 0.0))
    except RuntimeError as e:
        assert D.is_collective_failure(e)
        queue.put((rank, "failed", monitor.explain(e), time.monotonic() - start))
    finally:
        monitor.stop("failed")
        dist.destroy_process_group()


@pytest.mark.slow
def test_stuck_loader_ends_both_ranks_without_an_agent(tmp_path):
    """Plain processes (as a legacy shell loop starts them) running the real executor on a
    DDP model: rank 0 times out in the first micro-batch's collectives (DDP's, there is no
    per-batch has-next all-reduce) and names rank 1's phase; rank 1's watchdog ends rank 1
    itself (status 3)."""
    ctx = fork_server_context()
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_stall_worker, args=(r, port, 3.0, queue, tmp_path)) for r in range(2)]
    start = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    elapsed = time.monotonic() - start
    assert all(p.exitcode is not None for p in procs), "a rank is still hanging"
    assert procs[1].exitcode == D.EXIT_STALLED
    rank, outcome, message, waited = queue.get(timeout=5)
    assert (rank, outcome) == (0, "failed")
    assert ("while training on train batch 1/4 of epoch 0 (forward, backward with the gradient all-reduce)"
            in message), message
    assert re.search(r"rank 1 \(host .*pid \d+\): (STALLED, )?waiting for train batch 1/4 of epoch 0 "
                     r"from the data loader", message), message
    assert 2.5 < waited < 10 and elapsed < 40


def test_peer_summary_and_failure_classification():
    assert D.is_collective_failure(RuntimeError("[../gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                                                "waiting 4000ms for recv operation to complete"))
    assert not D.is_collective_failure(ValueError("bad config"))
    assert first_line(RuntimeError("[x.cc:1] Timed out waiting\nmore")) == "Timed out waiting"

    class Store(dict):
        def check(self, keys):
            return all(k in self for k in keys)

        def get(self, key):
            return self[key]

        def set(self, key, value):
            self[key] = value

    store = Store()
    for r in range(1, 12):
        peer = D.RankMonitor(D.DistContext(rank=r, world_size=12), 10, store)
        if r == 7:
            peer.set_phase("waiting for train batch 3/9 of epoch 1 from the data loader", "data")
        else:
            peer.set_phase("in the has-next all-reduce before train batch 3/9 of epoch 1", "collective")
        peer._publish()
    me = D.RankMonitor(D.DistContext(rank=0, world_size=12), 10, store)
    lines = me.describe_peers()
    assert len(lines) == 2 and "rank 7 " in lines[0] and "from the data loader" in lines[0]
    assert lines[1].startswith("10 other rank(s) were in a collective too: 1, 2, 3, 4, 5, 6, 8")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch_ddp", "torch_fsdp"])
def test_torchrun_job_with_a_stuck_rank_fails_within_the_timeout(tiny_experiment, tmp_path, engine):
    cfg = tiny_experiment.config(tmp_path / "c.yaml", launch={"timeout_s": TIMEOUT_S}, train_engine=engine)
    agent = forked_torchrun_args(["-m", "tests.hooked_train", "--stall_rank", "1", "--"],
                                 train_args(tiny_experiment, tmp_path / "exp", cfg))
    start = time.time()
    proc = fork_main("tests.forked_torchrun", agent, timeout=240)  # (the agent, from the fork server)
    end = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    # The stall began when rank 1 logged the fault injection (with its unix time to the ms: log
    # timestamps have 1 s resolution and no date). The job waited for the timeout -- not less,
    # or something else ended it -- and ended within the timeout + slack for a loaded machine.
    log1 = (tmp_path / "exp" / "log" / "rank1.log").read_text()
    stalled = float(re.search(r"fault injection .* hangs now \(unix time ([\d.]+)\)", log1).group(1))
    print(f"job: {end - start:.1f} s in total, {end - stalled:.1f} s after the stall began "
          f"(timeout_s {TIMEOUT_S})")
    assert TIMEOUT_S - 1 < end - stalled < TIMEOUT_S + 12, out[-3000:]
    # Both ranks give up at about the same time; whichever reports first names rank 1 and its batch:
    # rank 0 from rank 1's heartbeat (after its all-reduce timed out), or rank 1's own watchdog.
    by_rank0 = re.search(r"rank 1 \(host [^)]*\): (STALLED, )?waiting for train batch 1/3 of epoch 0 from the "
                         r"data loader, for [0-9.]+ s", out)
    by_rank1 = re.search(rf"rank 1 \(host [^)]*\): no batch from the data loader for [0-9.]+ s \(> "
                         rf"launch.timeout_s {TIMEOUT_S}\) while waiting for train batch 1/3 of epoch 0", out)
    assert by_rank0 or by_rank1, out[-3000:]
    if by_rank0:
        assert "a collective failed" in (tmp_path / "exp" / "log" / "rank0.log").read_text()
