"""``asrkit.train.engines.consolidate``: the bucketed gather of a sharded model's full state
dict equals torch's own per-tensor one, on two gloo processes, with uneven and empty shards,
mixed dtypes, buffers and several buckets."""
from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from asrkit.train.engines.consolidate import _rows
from tests.helpers import free_port


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_rows_follow_dim0_chunking(world):
    for n in range(0, 23):
        sizes = [len(c) for c in torch.arange(n).chunk(world)] if n else []
        assert [_rows(n, world, r) for r in range(world)] == sizes + [0] * (world - len(sizes))


class _Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(5, 3)                  # 3 rows on 2 ranks: 2 + 1
        self.b = torch.nn.Parameter(torch.randn(1, 4))  # 1 row: rank 1 holds none
        self.c = torch.nn.Embedding(9, 6).to(torch.bfloat16)
        self.register_buffer("steps", torch.arange(4, dtype=torch.int64))


def _worker(rank, port, queue):
    torch.set_num_threads(1)  # (as a forked DataLoader worker does: no OpenMP pool after fork)
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    from asrkit.train.engines.consolidate import full_model_state
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = _Toy()
        fully_shard(model.a)
        fully_shard(model)
        reference = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        ours = full_model_state(model, rank == 0, bucket_bytes=40)  # (a few tensors per bucket)
        if rank == 0:
            same = list(ours) == list(reference) and all(
                ours[k].dtype == reference[k].dtype and torch.equal(ours[k], reference[k]) for k in reference)
            queue.put((same, {k: (tuple(v.shape), str(v.dtype)) for k, v in ours.items()}))
        else:
            queue.put((ours is None, None))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_bucketed_gather_equals_torch_full_state_dict():
    ctx = mp.get_context("fork")  # (torch is imported already: spawning would import it twice more, ~5 s)
    queue, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0, 0]
    assert all(ok for ok, _ in results), results
    shapes = next(s for _, s in results if s)
    assert shapes["b"] == ((1, 4), "torch.float32") and shapes["c.weight"] == ((9, 6), "torch.bfloat16")
