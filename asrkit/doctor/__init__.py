"""``asrkit doctor``: the preflight to run on every node before a multi-node job.

Each check is a small function returning :class:`~asrkit.doctor.results.CheckResult` lines
(``OK|WARN|FAIL check: what [-> fix]``):

* :mod:`~asrkit.doctor.versions` -- python, torch, CUDA, nccl, gloo;
* :mod:`~asrkit.doctor.network` -- interfaces, the route to the master, the socket-interface
  variables;
* :mod:`~asrkit.doctor.files` -- the config and the files the training reads (data lists
  with the first audio files, units, BPE model, CMVN);
* :mod:`~asrkit.doctor.port` -- the master port: free on node 0, reachable from the others;
* :mod:`~asrkit.doctor.rendezvous` -- the nodes meet at the master port and compare
  versions and the hashes of config and files (``agreement``);
* :mod:`~asrkit.doctor.allreduce` -- a gloo all-reduce across the nodes: latency and bandwidth.

``asrkit.doctor.checkup.run_checks`` runs them in that order for the ``DoctorJob``
``asrkit.bin.doctor`` builds from its options: exit status 0 when no line failed, 2 otherwise.
"""
from asrkit.doctor.results import FAIL, OK, WARN, CheckResult, exit_status

__all__ = ["CheckResult", "OK", "WARN", "FAIL", "exit_status"]
