"""The doctor's run: a :class:`DoctorJob` (what ``asrkit.bin.doctor`` builds from its
options) checked in order -- versions, network, config and files, the master port, then,
with several nodes, the rendezvous (agreement) and the all-reduce -- each result printed as
it comes; :func:`run_checks` returns the exit status (0 when no line is FAIL, else 2)."""
from __future__ import annotations

import dataclasses
import os
import sys

from asrkit.doctor.results import exit_status, fail, ok


@dataclasses.dataclass(frozen=True)
class DoctorJob:
    """The job to check on this node: the launch (``num_nodes``, ``node_rank``, the master's
    address and port), what the training reads (``config`` with ``overrides``, the lists,
    the audio of their first ``audio_entries`` entries) and how to wait and measure (each
    wait at most ``timeout_s``; all-reduces of ``sizes_mb`` MB, ``repeats`` each, WARN under
    ``min_bandwidth_mb_s``)."""

    num_nodes: int
    node_rank: int
    master_addr: str
    master_port: int
    config: str
    train_data: str
    cv_data: str
    overrides: tuple[str, ...] = ()
    audio_entries: int = 3
    timeout_s: float = 300.0
    sizes_mb: tuple[float, ...] = (1.0, 4.0, 16.0, 64.0)
    repeats: int = 5
    min_bandwidth_mb_s: float = 100.0


class Report:
    """Prints each result line as it comes (stdout, flushed) and keeps them for the exit status."""

    def __init__(self):
        self.results: list = []

    def add(self, results) -> list:
        for r in results:
            print(r.line(), flush=True)
        self.results.extend(results)
        return results


def run_checks(job: DoctorJob) -> int:
    """Every check of ``job``, its lines on stdout and a summary on stderr; the exit status
    (130 when interrupted)."""
    report = Report()
    try:
        check_all(job, report)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    counts = {s: sum(r.status == s for r in report.results) for s in ("OK", "WARN", "FAIL")}
    print(f"doctor (node {job.node_rank} of {job.num_nodes}): {counts['OK']} OK, {counts['WARN']} WARN, "
          f"{counts['FAIL']} FAIL", file=sys.stderr)
    return exit_status(report.results)


def guarded(check: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or -- when it raises unexpectedly (a bug, or something no
    check foresaw) -- one FAIL line for ``check`` with the exception, instead of a traceback."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        return [fail(check, f"the check stopped with {type(e).__name__}: {e}",
                     "report this with the lines above (the asrkit issue tracker)")]


def check_all(job: DoctorJob, report: Report) -> None:
    """The checks in order (module doc); each one's unexpected failure is its FAIL line."""
    # (deferred: these import torch, which must load after the caller set TORCH_CPP_LOG_LEVEL)
    from asrkit.doctor.files import JobInputs, check_inputs
    from asrkit.doctor.network import check_network
    from asrkit.doctor.port import check_master_address, check_port_free, wait_port_reachable
    from asrkit.doctor.versions import check_versions, node_facts
    from asrkit.train.dist import LaunchError, resolve_backend
    inputs = guarded("files", check_inputs, job.config, list(job.overrides), job.train_data, job.cv_data,
                     job.audio_entries)
    if isinstance(inputs, list):  # (the check broke: compare no config and no files)
        inputs = inputs, JobInputs(None, {}, None, inputs[0].what)
    input_results, inputs = inputs
    report.add(guarded("versions", check_versions, inputs.dist_backend))
    try:
        backend = resolve_backend(inputs.dist_backend) if inputs.dist_backend else None
    except LaunchError:
        backend = None
    network = report.add(guarded("network", check_network, job.master_addr, job.num_nodes, os.environ, backend))
    report.add(input_results)
    report.add(guarded("master port", check_master_address, job.master_addr, job.num_nodes))  # (every node)
    if job.node_rank == 0:
        port = report.add(guarded("master port", check_port_free, job.master_addr, job.master_port))
    else:
        port = report.add(guarded("master port", wait_port_reachable, job.master_addr, job.master_port,
                                  job.timeout_s))
    if any(r.failed for r in port):
        return
    if job.num_nodes == 1:
        report.add([ok("allreduce", "single node (--num_nodes 1): no all-reduce across nodes to measure")])
        return
    versions = guarded("versions", node_facts)
    if isinstance(versions, list):
        report.add(versions)
        versions = {}
    broke = guarded("rendezvous", meet, job, report, versions, inputs,
                    network_failed=any(r.failed for r in network))
    report.add(broke or [])


def meet(job: DoctorJob, report: Report, versions: dict, inputs, network_failed: bool) -> None:
    """The nodes' rendezvous at the master port: agreement, then the all-reduce -- run only
    when every node's gloo can open its device and no node's network check failed (it would
    only wait out the timeout).  ``inputs``: this node's ``asrkit.doctor.files.JobInputs``."""
    # (deferred: these import torch, which must load after the caller set TORCH_CPP_LOG_LEVEL)
    from asrkit.doctor import rendezvous as rdv
    from asrkit.doctor.allreduce import run_allreduce
    gloo_problem = rdv.gloo_device_problem(os.environ) or (
        "its network check failed (its report says why)" if network_failed else "")
    facts = rdv.make_facts(job.node_rank, inputs.config, inputs.files, versions, inputs.problem, gloo_problem)
    try:
        store = rdv.open_store(job.master_addr, job.master_port, job.num_nodes, job.node_rank, job.timeout_s)
        everyone = rdv.exchange(store, facts, job.num_nodes, job.timeout_s)
    except rdv.RendezvousError as e:
        report.add([fail(rdv.RENDEZVOUS, str(e), "start asrkit doctor on every node with the same --num_nodes, "
                                                  "--master_addr and --master_port, each with its own --node_rank")])
        return
    try:
        report.add(rdv.compare_facts(everyone, rdv.duplicate_ranks(store, job.num_nodes)))
        no_gloo = [f"node {n.rank} (host {n.host}): {n.gloo_problem}" for n in everyone if n.gloo_problem]
        if no_gloo:
            report.add([fail("allreduce", "not run: gloo cannot connect " + "; ".join(no_gloo),
                             "fix the network lines of those nodes (GLOO_SOCKET_IFNAME), then run the doctor "
                             "again on every node")])
        else:
            report.add(run_allreduce(store, job.node_rank, job.num_nodes, job.timeout_s, list(job.sizes_mb),
                                     job.repeats, min_bandwidth_mb_s=job.min_bandwidth_mb_s))
    finally:
        rdv.finish(store, job.node_rank, [n.rank for n in everyone], job.timeout_s)
