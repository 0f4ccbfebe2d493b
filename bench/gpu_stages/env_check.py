"""What the GPU check needs of its machine, checked before anything runs: CUDA (unless
``--cpu_dry_run``), the packages the library imports (soundfile is the one a bare GPU
machine lacks: its wheel is carried), pytest, and the carried corpus.  ``problems`` are
what stops the check; :func:`describe` is what the results record of the machine."""
from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import sys
from pathlib import Path

WHEEL_INSTALL = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
                 "--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site")
PREPARE = "python -m tools.prepare_gpu_carry"
# what asrkit's training and the stages import, and where each comes from when missing
PACKAGES = {"torch": "", "torchaudio": "", "numpy": "", "yaml": "pyyaml", "sentencepiece": "",
            "tensorboard": "", "pytest": ""}


def problems(corpus: Path, dry_run: bool) -> list[str]:
    """Everything missing, one phrase each (empty: the check can run)."""
    found = []
    for module, package in PACKAGES.items():
        if importlib.util.find_spec(module) is None:
            found.append(f"{package or module} is not installed")
    try:
        importlib.import_module("soundfile")
    except (ImportError, OSError) as e:
        found.append(f"soundfile does not import ({type(e).__name__}: {str(e).splitlines()[0][:80]}): carry .whl "
                     f"(made by {PREPARE}) and start the command with: {WHEEL_INSTALL}")
    if not dry_run:
        import torch
        if not torch.cuda.is_available():
            found.append(f"CUDA is not available to torch {torch.__version__} (no GPU or driver): run on a GPU "
                         f"machine, or pass --cpu_dry_run")
    if not corpus.is_file():
        found.append(f"the carried corpus {corpus} is missing: make it here with {PREPARE} and carry .gpu_carry")
    return found


def describe() -> dict:
    """The machine, the interpreter, torch, CUDA and the GPU (what the results are from)."""
    import torch
    info = {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_count=torch.cuda.device_count(), gpu_memory_GiB=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count,
                    bf16_supported=torch.cuda.is_bf16_supported(),
                    nccl=".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None)
    else:
        info["gpu"] = None
    for module in ("torchaudio", "soundfile", "numpy"):
        try:
            info[module] = importlib.import_module(module).__version__
        except Exception as e:  # (recorded, not raised: the check says what is missing first)
            info[module] = f"unavailable: {type(e).__name__}"
    return info
