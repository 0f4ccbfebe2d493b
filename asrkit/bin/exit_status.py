"""The command-line tools' exit statuses: bad input (``asrkit.config_files.BAD_INPUT``: a file the
user handed in -- config, units, BPE model, non-linguistic symbols, CMVN, checkpoint, data
list -- that is missing or malformed) is reported in one line with status 2; other failures
(a write that failed, a bug) exit 1."""
from __future__ import annotations

import argparse
import logging
from typing import Callable

from asrkit.config_files import BAD_INPUT


def run_tool(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, log: logging.Logger,
             bad_input: tuple[type[BaseException], ...] = (), hints: dict[type, str] | None = None) -> int:
    """``run(args)`` with the tools' exit statuses and logging: bad input (:data:`BAD_INPUT`
    and the tool's own ``bad_input`` types) logged in one line, status 2; an exception of a
    type in ``hints`` logged with its hint, and ``ValueError``/``OSError``/``RuntimeError``
    logged as they are, status 1.  Logging is configured first (INFO, timestamped)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        return run(args)
    except (*bad_input, *BAD_INPUT) as e:  # what was handed in: one line, status 2
        log.error("%s", e)
        return 2
    except (*(hints or {}), ValueError, OSError, RuntimeError) as e:
        hint = next((h for t, h in (hints or {}).items() if isinstance(e, t)), "")
        log.error("%s%s", e, f": {hint}" if hint else "")
        return 1
