"""Collective helpers in real 2-process gloo groups: the executor's has-next safety net, rank-0 decisions."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from asrkit.train.schema import LaunchConf
from asrkit.train.dist import DistContext, LaunchError, check_init_method, resolve_launch
from tests.helpers import free_port, random_batch, spawn_ranks, tiny_config_dict


def _tiny_ddp_executors(ctx, tmp, accum_grads):
    """One DDP-wrapped tiny model, and an Executor for it per ``accum_grad``."""
    from asrkit.config import TrainConfig
    from asrkit.schema import build
    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    from asrkit.train.dist import wrap_ddp
    from asrkit.train.executor import Executor
    from asrkit.train.scheduler import build_optimizer, build_scheduler
    cfgs = {a: build(TrainConfig, tiny_config_dict(accum_grad=a)) for a in accum_grads}
    torch.manual_seed(0)
    model = wrap_ddp(build_model(cfgs[accum_grads[0]], 80, Vocabulary.of_size(10)), ctx, find_unused_parameters=False)
    opt = build_optimizer(cfgs[accum_grads[0]], model.parameters())
    sched = build_scheduler(cfgs[accum_grads[0]], opt)
    return {a: Executor(cfg, model, opt, sched, ctx, tmp, progress=False) for a, cfg in cfgs.items()}


def _uneven_worker(rank, port, cases, tmp, results):
    """Train each case's per-rank batch lists with a real DDP model and Executor."""
    import logging
    from asrkit.train.counters import TrainState
    torch.set_num_threads(1)
    errors: list = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: errors.append(record.getMessage())
    logging.getLogger("asrkit.train").addHandler(handler)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        ctx = DistContext(rank=rank, world_size=2)
        executors = _tiny_ddp_executors(ctx, tmp, sorted({accum for accum, _ in cases.values()}))
        for name, (accum, lengths) in cases.items():
            ex = executors[accum]
            gen = torch.Generator().manual_seed(10 * rank)
            batches = [random_batch(gen, 1, vocab=10, max_frames=20) for _ in range(lengths[rank])]
            for i, b in enumerate(batches):
                b["keys"] = [f"r{rank}b{i}"]
            errors.clear()
            steps = list(ex.steps(batches, state := TrainState()))  # (ends with the epoch on every rank)
            results[(name, rank)] = (state.step, sum(r.utterances for r in steps),
                                     any("a sampler bug" in e for e in errors))
        decided = ctx.decide(rank == 0)            # rank 0's value wins everywhere
        total = ctx.sum_floats([rank + 1.0])[0]
        results[("after", rank)] = (decided, total)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_has_next_safety_net_stops_all_ranks_together(tmp_path):
    """Unequal batch counts (the sampler's equalisation bypassed) in a real 2-rank DDP
    executor: nobody hangs, both ranks end the epoch after the same optimizer step and
    train only what the other rank could match, and later collectives still pair up.
    Cases: one rank a batch short with accum_grad 1 (the old has-next test: both train
    batches 0-3), a rank out of batches before a group starts (accum 4: 5 vs 4 batches),
    and last groups of different sizes (accum 4: 6 vs 5 batches; all ranks end together,
    the step is applied over what was trained)."""
    cases = {"accum1": (1, [5, 4]), "accum4_group_missing": (4, [5, 4]), "accum4_short_group": (4, [6, 5]),
             "even": (2, [4, 4])}
    manager = mp.Manager()
    results = manager.dict()
    spawn_ranks(_uneven_worker, (free_port(), cases, tmp_path, results))
    # (optimizer steps, utterances trained in applied steps, "a sampler bug" logged)
    assert results[("accum1", 0)] == (4, 4, True) and results[("accum1", 1)] == (4, 4, False)
    assert results[("accum4_group_missing", 0)] == (1, 4, True)
    assert results[("accum4_group_missing", 1)] == (1, 4, False)
    assert results[("accum4_short_group", 0)] == (2, 6, True)
    assert results[("accum4_short_group", 1)] == (2, 5, True)
    assert results[("even", 0)] == results[("even", 1)] == (2, 4, False)
    assert results[("after", 0)] == results[("after", 1)] == (True, 3.0)


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
        check_init_method("env://")
    with pytest.raises(LaunchError, match="unknown init_method"):
        check_init_method("udp://x")
    with pytest.raises(LaunchError, match="does not exist"):
        check_init_method(f"file://{tmp_path}/nope/init")
    fresh = tmp_path / "init"
    fresh.write_text("")
    check_init_method(f"file://{fresh}")  # just created by another rank of this job: fine
    old = fresh.stat().st_mtime - 3600
    os.utime(fresh, (old, old))
    with pytest.raises(LaunchError, match="left over from an earlier run"):
        check_init_method(f"file://{fresh}")
    if not torch.cuda.is_available():
        with pytest.raises(LaunchError, match="nccl needs CUDA"):
            resolve_launch(LaunchConf(dist_backend="nccl"))
