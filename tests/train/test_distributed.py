"""Collective helpers in real 2-process gloo groups: the has-next safety net, rank-0 decisions."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from asrkit.config import LaunchConf
from asrkit.train.distributed import (DistContext, LaunchError, check_init_method, iterate_together,
                                      resolve_launch)
from tests.helpers import free_port


def _worker(rank, port, lengths, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        ctx = DistContext(rank=rank, world_size=2)
        got = list(iterate_together(range(lengths[rank]), ctx))
        decided = ctx.decide(rank == 0)            # rank 0's value wins everywhere
        total = ctx.sum_floats([rank + 1.0])[0]
        results[rank] = (got, decided, total)
    finally:
        dist.destroy_process_group()


def test_has_next_safety_net_stops_all_ranks_together():
    """One rank a batch short (the sampler's equalisation bypassed): nobody hangs, both stop."""
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_worker, args=(free_port(), [5, 4], results), nprocs=2, join=True)
    assert results[0][0] == [0, 1, 2, 3] and results[1][0] == [0, 1, 2, 3]
    assert results[0][1] is True and results[1][1] is True
    assert results[0][2] == results[1][2] == 3.0


def test_launch_precedence(monkeypatch):
    conf = LaunchConf(dist_backend="gloo", init_method="tcp://10.0.0.1:1234")
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(v, raising=False)
    spec = resolve_launch(conf)
    assert (spec.world_size, spec.source, spec.init_method) == (1, "config", "tcp://10.0.0.1:1234")
    spec = resolve_launch(conf, rank=1, world_size=2, init_method="tcp://127.0.0.1:5")
    assert (spec.rank, spec.world_size, spec.source, spec.init_method) == (1, 2, "flags", "tcp://127.0.0.1:5")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    spec = resolve_launch(conf, rank=0, world_size=2)  # torchrun's environment wins over flags
    assert (spec.rank, spec.world_size, spec.local_rank, spec.source, spec.init_method) == \
        (3, 4, 1, "torchrun", "env://")
    with pytest.raises(LaunchError, match="outside"):
        monkeypatch.delenv("RANK")
        resolve_launch(conf, rank=2, world_size=2)


def test_init_method_checks(tmp_path, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(LaunchError, match="MASTER_ADDR"):
        check_init_method("env://", 0)
    with pytest.raises(LaunchError, match="unknown init_method"):
        check_init_method("udp://x", 0)
    with pytest.raises(LaunchError, match="does not exist"):
        check_init_method(f"file://{tmp_path}/nope/init", 0)
    fresh = tmp_path / "init"
    fresh.write_text("")
    check_init_method(f"file://{fresh}", 1)  # just created by another rank of this job: fine
    old = fresh.stat().st_mtime - 3600
    os.utime(fresh, (old, old))
    with pytest.raises(LaunchError, match="left over from an earlier run"):
        check_init_method(f"file://{fresh}", 0)
    if not torch.cuda.is_available():
        with pytest.raises(LaunchError, match="nccl needs CUDA"):
            resolve_launch(LaunchConf(dist_backend="nccl"))
