"""A sharded model's full (consolidated) state dict on rank 0, gathered in a few large
collectives instead of one per tensor.

``torch.distributed.checkpoint.state_dict.get_model_state_dict(full_state_dict=True)``
redistributes every ``DTensor`` on its own: one all-gather per parameter, a few hundred per
checkpoint for a conformer.  Each is latency-bound on small tensors (gloo: ~3 ms), which made
the consolidated copy cost as much as writing the shards.  Here every rank packs the bytes of
its dim-0 shards into buckets of at most ``bucket_bytes`` (of full tensors), one
``all_gather`` per bucket, and rank 0 cuts the full tensors out of them.

Which rows a rank holds follows ``Shard(0)``'s rule (``torch.chunk``): ``ceil(n / world)``
rows per rank in rank order, the last ranks getting fewer or none; every rank computes every
rank's share from the global shape, and its own is checked against its local tensor.  A
``DTensor`` placed any other way is gathered alone (``full_tensor``); plain tensors (buffers,
which every rank holds whole) are taken from rank 0's copy."""
from __future__ import annotations

import math
from typing import Optional

import torch

BUCKET_BYTES = 64 << 20


def _rows(n: int, world: int, rank: int) -> int:
    """Rows of a dim-0 sharded tensor of ``n`` rows that ``rank`` of ``world`` holds."""
    size = math.ceil(n / world) if n else 0
    return max(0, min(size, n - rank * size))


def _is_dim0_sharded(value) -> bool:
    from torch.distributed.tensor import DTensor, Shard
    return (isinstance(value, DTensor) and value.device_mesh.ndim == 1 and len(value.placements) == 1
            and value.placements[0] == Shard(0) and value.dim() > 0)


def _gather_bucket(entries: list, world: int, rank: int, is_main: bool, out: dict) -> None:
    """One all-gather of ``entries`` (``(name, DTensor)``): their full tensors into ``out`` on rank 0."""
    import torch.distributed as dist
    # bytes of each entry each rank holds: shares[i][r] (rows x bytes per row)
    shares = [[_rows(v.shape[0], world, r) * (v.numel() // v.shape[0] * v.element_size() if v.shape[0] else 0)
               for r in range(world)] for _, v in entries]
    device = entries[0][1].to_local().device
    mine = torch.zeros(max(sum(s[r] for s in shares) for r in range(world)), dtype=torch.uint8, device=device)
    offset = 0
    for (name, value), share in zip(entries, shares):
        local, expected = value.to_local(), _rows(value.shape[0], world, rank)
        if local.shape[0] != expected:
            raise RuntimeError(f"{name}: rank {rank} holds {local.shape[0]} rows of {value.shape[0]}, "
                               f"not the {expected} of dim-0 sharding over {world} ranks")
        if share[rank]:
            mine[offset:offset + share[rank]] = local.contiguous().reshape(-1).view(torch.uint8)
        offset += share[rank]
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    if not is_main:
        return
    gathered = [g.cpu() for g in gathered]
    offsets = [0] * world
    for (name, value), share in zip(entries, shares):
        parts = [gathered[r][offsets[r]:offsets[r] + share[r]] for r in range(world)]
        offsets = [o + b for o, b in zip(offsets, share)]
        out[name] = torch.cat(parts).view(value.dtype).reshape(value.shape).clone()


def full_model_state(model: torch.nn.Module, is_main: bool, bucket_bytes: int = BUCKET_BYTES) -> Optional[dict]:
    """Every rank of the process group: the state dict of FSDP-sharded ``model`` as plain,
    whole CPU tensors, returned on rank 0 (``is_main``), None on the others.  Keys and values
    equal ``get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
    cpu_offload=True))``'s (``tests/train/engines/test_consolidate.py``)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    world, rank = dist.get_world_size(), dist.get_rank()
    state = get_model_state_dict(model)
    out: dict = {}
    bucket, filled = [], 0
    for name, value in state.items():
        if _is_dim0_sharded(value):
            full_bytes = value.numel() * value.element_size()
            if bucket and filled + full_bytes > bucket_bytes:
                _gather_bucket(bucket, world, rank, is_main, out)
                bucket, filled = [], 0
            bucket.append((name, value))
            filled += full_bytes
        elif hasattr(value, "full_tensor"):
            full = value.full_tensor()
            if is_main:
                out[name] = full.detach().cpu().clone()
        elif is_main:
            out[name] = value.detach().cpu().clone()
    if bucket:
        _gather_bucket(bucket, world, rank, is_main, out)
    return {name: out[name] for name in state} if is_main else None
