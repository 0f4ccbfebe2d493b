"""Fault injection for runs that a test starts through a recipe (run.sh -> torchrun ->
``asrkit.bin.train``), where it cannot start ``tests.hooked_train`` itself.

A test puts this folder first on ``PYTHONPATH`` and sets ``ASRKIT_HOOK_KILL=RANK:STEP``;
Python imports this module at start-up in every process the recipe starts.  It imports
nothing heavy: it only waits for ``asrkit.train.trainer`` to be imported, then installs
``tests.hooked_train.install_kill(RANK, STEP)`` (rank RANK SIGKILLs itself after optimizer
step STEP, in the first torchrun attempt only).  ``ASRKIT_HOOK_PAUSE=RANK:STEP:PATH``
installs ``tests.hooked_train.install_pause`` instead (rank RANK waits after optimizer step
STEP until PATH exists; first attempt only).  Production code reads no test setting.
"""
import importlib.abc
import importlib.util
import os
import sys

_TARGET = "asrkit.train.trainer"


class _InstallKillAfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, rank: int, step: int, pause_path: str = ""):
        self.rank, self.step, self.pause_path = rank, step, pause_path

    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run_module = spec.loader.exec_module
        rank, step, pause_path = self.rank, self.step, self.pause_path

        def exec_module(module):
            run_module(module)
            from tests.hooked_train import install_kill, install_pause
            if pause_path:
                install_pause(rank, step, pause_path)
            else:
                install_kill(rank, step)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("ASRKIT_HOOK_KILL"):
    _rank, _step = (int(x) for x in os.environ["ASRKIT_HOOK_KILL"].split(":"))
    sys.meta_path.insert(0, _InstallKillAfterImport(_rank, _step))
elif os.environ.get("ASRKIT_HOOK_PAUSE"):
    _rank, _step, _path = os.environ["ASRKIT_HOOK_PAUSE"].split(":", 2)
    sys.meta_path.insert(0, _InstallKillAfterImport(int(_rank), int(_step), _path))
