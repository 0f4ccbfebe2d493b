"""The ``allreduce`` check: a gloo process group across the nodes, its latency and bandwidth.

The group is formed on the doctor's rendezvous store (``asrkit.doctor.rendezvous``), with
world size ``num_nodes`` and rank ``node_rank`` -- one process per node, over the interface
``GLOO_SOCKET_IFNAME`` names (or the one gloo picks from the host name), i.e. the path the
training's gradients take between nodes.

* latency: the median time of ``latency_rounds`` all-reduces of one float (a round trip
  through every node);
* bandwidth, per size S (MB = 10^6 bytes of float32): the median time t of ``repeats``
  all-reduces (after one warm-up) and the *bus bandwidth* ``S * 2 (n - 1) / n / t`` in MB/s
  -- the bytes each node sends per second in a ring all-reduce of n nodes, the figure to
  hold against the link's rate (for 2 nodes it equals S / t).

Each time is the slowest node's (all-reduced with MAX), so every node prints the same numbers.
"""
from __future__ import annotations

import dataclasses
import datetime
import statistics
import time
from typing import Sequence

from asrkit.doctor.results import CheckResult, fail, first_line, ok, warn

CHECK = "allreduce"
MB = 1_000_000


@dataclasses.dataclass
class Measurement:
    """``latency_ms`` (median one-float all-reduce) and, per size in MB, the median seconds
    and the bus bandwidth in MB/s."""

    nodes: int
    latency_ms: float
    seconds: dict[float, float]
    bus_mb_s: dict[float, float]


def bus_bandwidth(size_mb: float, seconds: float, nodes: int) -> float:
    """MB/s each node sends in a ring all-reduce of ``size_mb`` MB over ``nodes`` nodes taking ``seconds``."""
    return size_mb * 2 * (nodes - 1) / nodes / max(seconds, 1e-9)


def _timed(op, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        op()
        times.append(time.perf_counter() - t0)
    return times


def measure(sizes_mb: Sequence[float], repeats: int, latency_rounds: int) -> Measurement:
    """Run the measurements in the current (gloo) process group; every node must call it
    with the same arguments."""
    import torch
    import torch.distributed as dist
    nodes = dist.get_world_size()
    one = torch.zeros(1)

    def tiny():
        dist.all_reduce(one)

    tiny()  # (the first collective also connects the pairs)
    latency = statistics.median(_timed(tiny, latency_rounds))
    medians = []
    for size in sizes_mb:
        buf = torch.ones(max(1, int(size * MB) // 4), dtype=torch.float32)
        dist.all_reduce(buf)  # warm-up
        times = []
        for _ in range(repeats):
            tiny()  # (start together: the slowest node's arrival is not timed)
            times.extend(_timed(lambda: dist.all_reduce(buf), 1))
        medians.append(statistics.median(times))
    slowest = torch.tensor([latency, *medians], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    latency, *medians = slowest.tolist()
    return Measurement(nodes, latency * 1e3, dict(zip(sizes_mb, medians)),
                       {s: bus_bandwidth(s, t, nodes) for s, t in zip(sizes_mb, medians)})


def describe(m: Measurement) -> str:
    sizes = ", ".join(f"{s:g} MB {m.seconds[s] * 1e3:.1f} ms = {m.bus_mb_s[s]:.0f} MB/s" for s in m.seconds)
    return (f"{m.nodes} nodes over gloo: latency {m.latency_ms:.2f} ms (median one-float all-reduce); "
            f"bus bandwidth {sizes}")


def run_allreduce(store, node_rank: int, num_nodes: int, timeout_s: float, sizes_mb: Sequence[float],
                  repeats: int = 3, latency_rounds: int = 20, min_bandwidth_mb_s: float = 0.0) -> list[CheckResult]:
    """Form the gloo group on ``store`` (under its own key prefix), measure, and leave the
    group; one line (a WARN when the largest size's bandwidth is under ``min_bandwidth_mb_s``),
    or a FAIL when the group cannot be formed or a collective fails within ``timeout_s``."""
    import torch.distributed as dist
    try:
        dist.init_process_group("gloo", store=dist.PrefixStore("doctor_gloo/", store), rank=node_rank,
                                world_size=num_nodes, timeout=datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError) as e:
        return [fail(CHECK, f"gloo could not connect the {num_nodes} nodes within {timeout_s:g} s: {first_line(e)}",
                     "set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) on every node to the interface that reaches "
                     "the others (see the network lines), and let TCP between the nodes through on all ports")]
    try:
        m = measure(sizes_mb, repeats, latency_rounds)
    except (RuntimeError, ValueError) as e:
        return [fail(CHECK, f"an all-reduce across the {num_nodes} nodes failed: {first_line(e)}",
                     "a node left or the link dropped: check the other nodes' reports and the network between them")]
    finally:
        dist.destroy_process_group()
    largest = max(m.bus_mb_s) if m.bus_mb_s else None
    if largest is not None and m.bus_mb_s[largest] < min_bandwidth_mb_s:
        return [warn(CHECK, describe(m) + f" -- under {min_bandwidth_mb_s:g} MB/s",
                     "gradients cross this link every step: expect multi-node steps slower than one node's; "
                     "use the fast interface (GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME) or gradient compression")]
    return [ok(CHECK, describe(m))]
