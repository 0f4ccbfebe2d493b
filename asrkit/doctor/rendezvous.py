"""The doctor's own rendezvous and the ``agreement`` check.

Node 0 opens a TCP store at ``master_addr:master_port`` (the port torchrun's rendezvous will
use); every node connects to it and publishes its :class:`NodeFacts` (host, versions, the
hash of its config and files as ``asrkit.train.agreement.fingerprint`` computes it, whether
gloo can open a device here).  Every node then reads every node's facts and compares them
with node 0's (:func:`compare_facts`, worded by ``asrkit.train.agreement.differences``; in
that wording rank k is node k), so each node prints the same verdict.  The store's plain TCP
does not depend on ``GLOO_SOCKET_IFNAME``: a node whose gloo interface is wrong still checks
in, and the all-reduce is then skipped on every node instead of hanging.

Keys: ``facts/<rank>`` (JSON), ``claims/<rank>`` (a counter: two nodes giving the same
``--node_rank`` are caught when both have checked in before the comparison), ``done/<rank>``
(node 0 keeps its store open until every node that checked in is done with it).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import socket
import time
from typing import Optional

from asrkit.doctor.results import CheckResult, fail, first_line, ok
from asrkit.doctor.waiting import WaitProgress
from asrkit.train import agreement

CHECK = "agreement"
RENDEZVOUS = "rendezvous"


class RendezvousError(RuntimeError):
    """The store could not be opened or some node did not check in in time (the message says which)."""


@dataclasses.dataclass
class NodeFacts:
    """What one node publishes.  ``fingerprint`` (``asrkit.train.agreement.fingerprint`` with
    the versions as its ``extra``) and ``flat`` (the comparable config) are None when the
    node could not load its config, ``problem`` then says why; ``gloo_problem`` is why gloo
    could not connect this node ("" when nothing is known against it): its device cannot be
    opened, or its network check failed."""

    rank: int
    host: str
    versions: dict
    fingerprint: Optional[dict]
    flat: Optional[dict]
    problem: str = ""
    gloo_problem: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: bytes | str) -> "NodeFacts":
        return cls(**json.loads(text))


def make_facts(rank: int, config: Optional[dict], files: dict, versions: dict, problem: str = "",
               gloo_problem: str = "") -> NodeFacts:
    """This node's :class:`NodeFacts` (hashing the files named in ``files``)."""
    if config is None:
        return NodeFacts(rank, socket.gethostname(), versions, None, None, problem or "config not loaded",
                         gloo_problem)
    return NodeFacts(rank, socket.gethostname(), versions, agreement.fingerprint(config, files, versions),
                     agreement.comparable_config(config), problem, gloo_problem)


def open_store(master_addr: str, port: int, num_nodes: int, node_rank: int, timeout_s: float):
    """Node 0: the store's server on ``port``; other nodes: a client of ``master_addr:port``.
    Raises :class:`RendezvousError` with the reason."""
    import torch.distributed as dist
    try:
        return dist.TCPStore(master_addr, port, num_nodes, node_rank == 0,
                             timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    except (RuntimeError, ValueError) as e:  # (DistStoreError/DistNetworkError are RuntimeErrors)
        side = "open the store on" if node_rank == 0 else "connect to the store at"
        raise RendezvousError(f"cannot {side} {master_addr}:{port}: {first_line(e)}") from None


def _missing(store, keys: list[str]) -> list[str]:
    return [k for k in keys if not store.check([k])]


def exchange(store, facts: NodeFacts, num_nodes: int, timeout_s: float) -> list[NodeFacts]:
    """Publish ``facts`` and return every node's, in rank order; raise
    :class:`RendezvousError` naming the ranks that did not check in within ``timeout_s``.
    While waiting, a progress line on stderr every 10 s names the ranks not in yet."""
    keys = [f"facts/{r}" for r in range(num_nodes)]
    try:
        store.add(f"claims/{facts.rank}", 1)
        store.set(f"facts/{facts.rank}", facts.to_json())
        _wait_for_check_ins(store, keys, num_nodes, timeout_s)
        return [NodeFacts.from_json(store.get(k)) for k in keys]
    except RendezvousError:
        raise
    except RuntimeError as e:  # (node 0's store went away)
        raise RendezvousError(f"lost the connection to node 0's store: {first_line(e)}") from None


def _wait_for_check_ins(store, keys: list[str], num_nodes: int, timeout_s: float) -> None:
    """Wait for every key of ``keys`` in slices of at most ``PROGRESS_EVERY_S``, with a
    progress line between slices; :class:`RendezvousError` after ``timeout_s``."""
    progress = WaitProgress(f"the other nodes to check in at node 0's store ({num_nodes} nodes)", timeout_s)
    while True:
        try:
            store.wait(keys, datetime.timedelta(seconds=max(0.1, min(progress.every_s, progress.left()))))
            return
        except RuntimeError:  # (a slice timed out, or the store went away: the caller tells which)
            missing = [int(k.split("/")[1]) for k in _missing(store, keys)]
        if not missing:
            return
        if progress.left() <= 0:
            raise RendezvousError(f"node(s) {', '.join(map(str, missing))} of {num_nodes} did not check in "
                                  f"within {timeout_s:g} s")
        progress.tick(f"node(s) {', '.join(map(str, missing))} not in yet")


def duplicate_ranks(store, num_nodes: int) -> list[int]:
    """Ranks that more than one node claimed (``--node_rank`` given twice)."""
    return [r for r in range(num_nodes) if store.add(f"claims/{r}", 0) > 1]


def finish(store, rank: int, ranks_in: list[int], timeout_s: float) -> None:
    """Say this node is done; node 0 waits (at most ``timeout_s``) for the ``ranks_in`` that
    checked in, so its store outlives their last use of it."""
    try:
        store.set(f"done/{rank}", "1")
    except RuntimeError:  # (node 0 already gone: nothing waits for this node)
        return
    if rank != 0:
        return
    deadline = time.monotonic() + timeout_s
    for r in ranks_in:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            store.wait([f"done/{r}"], datetime.timedelta(seconds=left))
        except RuntimeError:
            return


def _version_items(mine: dict, ref: dict, rank: int) -> list[str]:
    return [f"{key} (rank {rank}: {mine.get(key)}, rank 0: {ref.get(key)})"
            for key in dict.fromkeys([*ref, *mine]) if mine.get(key) != ref.get(key)]


def compare_facts(all_facts: list[NodeFacts], duplicates: list[int] = ()) -> list[CheckResult]:
    """One OK line when every node agrees with node 0 on the versions, the config (less
    ``launch``) and the files; else a FAIL line per node that differs or could not load
    its config, and one per rank claimed twice."""
    results = [fail(CHECK, f"node rank {r} was given to more than one node",
                    "give every node its own --node_rank 0..num_nodes-1") for r in duplicates]
    ref = all_facts[0]
    for node in all_facts[1:]:
        who = f"node {node.rank} (host {node.host}) differs from node 0 (host {ref.host}) in: "
        if node.fingerprint is not None and ref.fingerprint is not None:
            items = agreement.differences(node.fingerprint, ref.fingerprint, node.flat, ref.flat,
                                          rank=node.rank, ref_rank=0)
        else:
            items = _version_items(node.versions, ref.versions, node.rank)
        if items:
            results.append(fail(CHECK, who + "; ".join(items),
                                "install the same torch and asrkit, and use the same config and files, on every node "
                                "(only the config's launch section may differ)"))
    unloaded = [n for n in all_facts if n.fingerprint is None]
    for node in unloaded:
        results.append(fail(CHECK, f"node {node.rank} (host {node.host}) could not load its config, so its config "
                                   f"and files were not compared: {node.problem}",
                            f"fix the config on node {node.rank} (its own report says how)"))
    if not results:
        used = [label for label, d in ref.fingerprint["files"].items() if d is not None]
        versions = ", ".join(f"{k} {v}" for k, v in ref.versions.items() if v is not None)
        results.append(ok(CHECK, f"the {len(all_facts)} node(s) have the same {versions}, config (less launch)"
                                 + (f", {', '.join(used)}" if used else "")))
    return results


def gloo_device_problem(environ: dict) -> str:
    """Why gloo cannot open a device on this node with ``GLOO_SOCKET_IFNAME`` from
    ``environ`` (each name of a comma-separated list is tried, as gloo does); "" when it can."""
    import torch.distributed as dist
    names = [n for n in environ.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    try:
        if names:
            for name in names:
                dist.ProcessGroupGloo.create_device(interface=name)
        else:
            dist.ProcessGroupGloo.create_default_device()
    except RuntimeError as e:
        text = first_line(e)
        if "enforce fail" in text:  # "[enforce fail at ...] ifa != nullptr. Unable to find address for: eth9"
            text = text.split("] ", 1)[-1]
            condition, _, reason = text.partition(". ")
            text = reason if reason and any(op in condition for op in ("!=", "==", "<", ">")) else text
        return text
    return ""
