"""The training's log files: ``<model_dir>/log/rank<R>.log`` on every rank, and rank 0's
lines on stderr too."""
from __future__ import annotations

import logging
import sys
from pathlib import Path


def setup_logging(model_dir: Path, rank: int) -> None:
    """Log INFO and above to ``<model_dir>/log/rank<rank>.log`` (and stderr on rank 0),
    replacing the handlers an earlier phase of the same process installed."""
    (model_dir / "log").mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter(f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    close_logging()  # (a warm start's handlers, when the main run follows it)
    file_handler = logging.FileHandler(model_dir / "log" / f"rank{rank}.log", encoding="utf-8")
    file_handler.setFormatter(fmt)
    handlers = [file_handler]
    if rank == 0:
        handlers.append(logging.StreamHandler(sys.stderr))
        handlers[-1].setFormatter(fmt)
    for h in handlers:
        h._asrkit_train = True  # (close_logging removes these and only these)
        root.addHandler(h)


def close_logging() -> None:
    """Flush and remove the handlers ``setup_logging`` installed (the training may run in a
    process that goes on: a test, a notebook)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_asrkit_train", False):
            root.removeHandler(h)
            h.close()
