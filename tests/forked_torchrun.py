"""torchrun with its workers forked from the agent: the fault tests' launcher.

``python -m tests.forked_torchrun <torchrun options> -m MODULE <args>``
runs what ``python -m torch.distributed.run <torchrun options> -m MODULE <args>`` runs -- the
same ``LaunchConfig`` from torchrun's own parser and ``config_from_args``, the same elastic
agent with its restarts (``--max_restarts``), signal forwarding and shutdown timeout -- except
that each worker is a process forked from the agent (``start_method="fork"``, which torch's
launcher honours for Python-function entry points only) calling ``MODULE.main(args)``
(``asrkit.bin.train`` or ``tests.hooked_train``), not a new interpreter.  The agent imports
MODULE first, so a worker starts with torch and asrkit imported instead of spending ~3-5 s
importing them again, on every attempt of every test.  The tests run the agent itself with
``tests.helpers.fork_main``: forked from the fork server, which has imported all of that
already and what FSDP imports on its first use (``tests.helpers.FORK_SERVER_PRELOAD``).

A worker ends as ``asrkit.bin.train`` ends: ``main``'s status, without the interpreter's
finalization (the forked worker's ``multiprocessing`` bootstrap ends it with ``os._exit``;
``asrkit.train.entry.exit_process`` says why that matters).  The real ``torchrun`` command is
what the recipes, the multi-node guide's test and ``tests/train/test_collectives_per_step.py`` run.
"""
from __future__ import annotations

import importlib
import sys


def _worker(module: str, *argv: str) -> int:
    from asrkit.train.entry import end_children, status_of
    code = status_of(lambda: importlib.import_module(module).main(list(argv)))
    end_children()  # (before the bootstrap's exit hook, which would wait for them: end_children says why)
    if code:
        raise SystemExit(code)  # (the worker's exit status, as the agent reads it)
    return 0


def main(argv: list[str]) -> int:
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, get_args_parser
    args = get_args_parser().parse_args(argv)
    if not args.module or args.master_port is None:
        print("error: tests.forked_torchrun needs -m MODULE and --master_port", file=sys.stderr)
        return 2
    importlib.import_module(args.training_script)
    config, _, _ = config_from_args(args)
    config.start_method = "fork"
    elastic_launch(config, entrypoint=_worker)(args.training_script, *args.training_script_args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
