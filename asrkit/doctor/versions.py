"""The ``versions`` check: python, torch, CUDA, nccl and gloo on this node.

The torch version (and the asrkit source, the nccl version) must also be the *same* on
every node: :func:`node_facts` returns them for the cross-node comparison that
``asrkit.doctor.rendezvous`` makes, with the keys the training's agreement preflight uses.
"""
from __future__ import annotations

import platform
from typing import Optional

from asrkit.doctor.results import CheckResult, fail, ok, warn
from asrkit.train.agreement import package_digest
from asrkit.train.dist import LaunchError, resolve_backend

CHECK = "versions"


def nccl_version() -> Optional[str]:
    """``"2.21.5"`` when CUDA is usable and torch has nccl, else None."""
    import torch
    if not torch.cuda.is_available():
        return None
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def node_facts() -> dict[str, Optional[str]]:
    """What must be equal on every node, under the names ``asrkit.train.agreement`` uses:
    ``torch version``, ``asrkit source`` (digest of the package's sources) and ``nccl version``
    (None without CUDA)."""
    import torch
    return {"torch version": torch.__version__, "asrkit source": package_digest(),
            "nccl version": nccl_version()}


def check_versions(dist_backend: Optional[str] = None) -> list[CheckResult]:
    """One line with the versions, and a FAIL when this node cannot run the job:
    torch.distributed missing, gloo missing where there is no GPU, or the config's
    ``launch.dist_backend`` (``dist_backend``, when the config was read) unusable here."""
    import torch
    import torch.distributed as dist

    parts = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    if torch.cuda.is_available():
        parts.append(f"CUDA {torch.version.cuda} with {torch.cuda.device_count()} GPU(s)")
        nccl = nccl_version()
        parts.append(f"nccl {nccl}" if nccl else "no nccl")
    elif torch.version.cuda:
        parts.append(f"CUDA not available (torch built for CUDA {torch.version.cuda}; no GPU visible)")
    else:
        parts.append("CUDA not available (CPU build of torch)")
    if not dist.is_available():
        return [fail(CHECK, ", ".join(parts) + ": torch.distributed is not available in this torch build",
                     "install a torch build with distributed support (the pip wheels have it)")]
    gloo = dist.is_gloo_available()
    parts.append("gloo available" if gloo else "no gloo")
    results = []
    backend = None
    if dist_backend is not None:
        try:
            backend = resolve_backend(dist_backend)
        except LaunchError as e:
            results.append(fail(CHECK, f"launch.dist_backend {dist_backend}: {e}",
                                "set launch.dist_backend: auto (nccl with GPUs, gloo without)"))
        else:
            parts.append(f"training backend {backend}")
    if not gloo and not torch.cuda.is_available():
        results.append(fail(CHECK, "this torch has neither gloo nor CUDA: no backend can run here",
                            "install a torch build with gloo (the pip wheels have it)"))
    elif backend == "nccl" and not nccl_version():
        results.append(fail(CHECK, "the training backend is nccl but torch has no nccl here",
                            "install a CUDA build of torch with nccl, or set launch.dist_backend: gloo"))
    elif not gloo:
        results.append(warn(CHECK, "torch has no gloo: the doctor's all-reduce (gloo) cannot run",
                            "install a torch build with gloo to measure the network"))
    return [ok(CHECK, ", ".join(parts))] + results
