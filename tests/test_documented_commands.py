"""Every command the README and docs/ show runs as shown, with only the venv (no ``PYTHONPATH``,
no sourced environment): each ``python tools/<name>.py`` / ``python bench/<name>.py``,
``python -m <module>``, ``asrkit <subcommand>`` / ``asrkit-<tool>`` and ``bash <script>`` line is
found, its program is run with ``--help`` and every ``--option`` the line uses must be one the
program lists.  Every ``tools/*.py`` and ``bench/*.py`` answers ``--help`` the same way.

The Python programs run in this one interpreter (``runpy``: one torch import for all), each as a
fresh ``python PATH`` / ``python -m`` would see it: the repository root off ``sys.path`` (the
venv's editable install still finds ``asrkit``), the script's folder first for a path, and the
repository's ``tools`` / ``bench`` / ``tests`` packages forgotten so that they must be found as
such a run finds them.  ``bash`` lines run in a subprocess (no Python in them to speak of).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

from asrkit.bin.cli import SUBCOMMANDS
from tests.helpers import REPO

pytestmark = pytest.mark.filterwarnings("ignore:.*found in sys.modules.*:RuntimeWarning")  # (runpy of an imported module)
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("examples/*/s0/README.md"))]
REPO_PACKAGES = ("tools", "bench", "tests")
# console scripts (setup.py's entry points) as "name = module:function"
CONSOLE_SCRIPTS = dict(re.findall(r'"([\w-]+) = ([\w.]+):main"', (REPO / "setup.py").read_text(encoding="utf-8")))
_PROGRAM = re.compile(r"(?<![\w./-])(?:python3? (?:-m [\w.]+|[\w./-]+\.py)|(?:tools|bench)/\w+\.py|bash [\w./-]+"
                      r"|asrkit(?:-[\w-]+)? [a-z]+)")
_MAIN = re.compile(r"^if __name__ == .__main__.:", re.M)
_END = re.compile(r"`|\s(?:\||&&|;|>|2>|#)\s|$")


class Command(NamedTuple):
    program: str          # "python -m asrkit.bin.train", "python tools/x.py", "asrkit serve", "bash run.sh"
    options: tuple        # the --options the documented line uses
    where: str            # "docs/x.md:12"
    first_word: str       # the word after the program ("up" of "python tools/netns_hosts.py up"), or ""


def documented_commands() -> list[Command]:
    """The commands of README.md and docs/*.md: each program match, with the rest of its code
    span or line (code blocks' ``\\`` continuations joined) up to a pipe, ``&&``, ``;`` or a
    redirection."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
        for number, line in enumerate(text.splitlines(), 1):
            for match in _PROGRAM.finditer(line):
                program = match.group(0)
                if program.endswith(".") or line[match.end():match.end() + 1] == "<":
                    continue  # a placeholder: `python -m bench.<name>`
                if program.startswith(("tools/", "bench/")):  # run by its path: its shebang's python3
                    program = f"python {program}"
                if program.startswith("asrkit") and not _is_cli(program):
                    continue  # prose: "asrkit reads ...", "asrkit eager ..."
                if program.startswith("python3 -m pip") or program.startswith("python -m pip"):
                    continue
                rest = line[match.end():]
                rest = rest[:_END.search(rest).start()]
                options = tuple(dict.fromkeys(o.split("=")[0] for o in re.findall(r"(?<![\w-])--[\w-]+(?:=)?", rest)))
                first = re.match(r"\s*([a-z][\w-]*)", rest)
                found.append(Command(program, options, f"{doc.relative_to(REPO)}:{number}", first.group(1) if first else ""))
    return found


def _is_cli(program: str) -> bool:
    name, sub = program.split(" ", 1)
    return (name == "asrkit" and sub in SUBCOMMANDS) or (name in CONSOLE_SCRIPTS and name != "asrkit")


@contextlib.contextmanager
def fresh_interpreter(argv: list[str], script_dir: Path | None) -> Iterator[None]:
    """``sys.argv``, ``sys.path`` and ``sys.modules`` as a new ``python`` with only the venv
    would have them (module docstring); all three restored afterwards."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    saved_modules = {k: m for k, m in sys.modules.items() if k.split(".")[0] in REPO_PACKAGES}
    root = str(REPO)
    sys.argv = argv
    sys.path[:] = [p for p in sys.path if p not in ("", root) and Path(p or ".").resolve() != REPO]
    if script_dir is not None:
        sys.path.insert(0, str(script_dir))
    for name in saved_modules:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [k for k in sys.modules if k.split(".")[0] in REPO_PACKAGES]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        sys.argv, sys.path[:] = saved_argv, saved_path


def python_help(program: str, monkeypatch, sub: str = "") -> str:
    """What ``PROGRAM [SUB] --help`` prints (``SystemExit(0)`` expected), run in this
    interpreter from the repository root."""
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    words = program.split()
    script = (REPO / words[1]).resolve() if words[0].startswith("python") and words[1] != "-m" else None
    tail = [sub, "--help"] if sub else ["--help"]
    argv = [str(script) if script else words[-1], *tail]
    if words[0] in CONSOLE_SCRIPTS:  # asrkit SUB / asrkit-TOOL
        argv = [words[0], *words[1:], *tail]
    code: object = "no SystemExit"
    # (`python -m` puts the working folder first on sys.path, `python PATH` the script's folder)
    with fresh_interpreter(argv, script.parent if script else REPO), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        try:
            if words[0] in CONSOLE_SCRIPTS:
                sys.exit(runpy.run_module(CONSOLE_SCRIPTS[words[0]])["main"]())
            elif script is None:
                runpy.run_module(words[2], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(str(script), run_name="__main__")
        except SystemExit as e:
            code = e.code
    assert code in (0, None), f"{program} --help exited {code!r}:\n{out.getvalue()[-2000:]}"
    return out.getvalue()


def recipe_options() -> set[str]:
    """The options any recipe's ``run.sh`` takes (each lists them for ``--help``), and the
    top-level ``run.sh``'s (it passes its options to the digits recipe)."""
    options: set[str] = set()
    for script in sorted(REPO.glob("examples/*/s0/run.sh")):
        done = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=60)
        listed = re.findall(r"^\s+(--[\w-]+)", done.stderr, re.M)
        assert len(listed) > 10, f"{script} --help: {done.stderr[-500:]}"
        options.update(listed)
    return options


def test_the_docs_show_the_commands_this_test_runs():
    commands = documented_commands()
    programs = {c.program for c in commands}
    assert len(commands) >= 100 and len(programs) >= 35, sorted(programs)  # (2026-11-28: 190 lines, 52 programs)
    for want in ("python -m asrkit.bin.train", "asrkit transcribe", "asrkit serve", "bash run.sh", "bash tests/run.sh",
                 "python tools/tune_fusion.py", "python -m bench.serve_load"):
        assert want in programs, want


def _is_module_file(program: str) -> bool:
    """A shared module named by its path in prose (``tools/sentence_grammar.py``): no program."""
    path = REPO / program.split()[-1]
    return path.suffix == ".py" and path.is_file() and not _MAIN.search(path.read_text(encoding="utf-8"))


def _python_programs() -> list[str]:
    documented = {c.program for c in documented_commands() if not c.program.startswith("bash ")
                  and not _is_module_file(c.program)}
    every_script = {f"python {p.relative_to(REPO)}" for p in [*REPO.glob("tools/*.py"), *REPO.glob("bench/*.py")]
                    if _MAIN.search(p.read_text(encoding="utf-8"))}  # (not the modules they share)
    return sorted(documented | every_script)


def test_every_documented_python_program_and_every_tool_answers_help_with_the_options_shown(monkeypatch):
    """All in one test: each program's ``--help`` (one runpy each, ~0.1 s), and each documented
    line's options among those it lists."""
    used: dict[tuple, dict[str, str]] = {}  # (program, subcommand or "") -> option -> where
    for c in documented_commands():
        used.setdefault((c.program, c.first_word), {})
        for option in c.options:
            used[(c.program, c.first_word)].setdefault(option, c.where)
    bad = []
    for program in _python_programs():
        words = program.split()
        if words[1] != "-m" and not words[0].startswith("asrkit") and not (REPO / words[1]).is_file():
            where = next(c.where for c in documented_commands() if c.program == program)
            bad.append(f"{where}: {program}: no such file")
            continue
        try:
            text = python_help(program, monkeypatch)
        except Exception as e:  # (one report for all programs)
            bad.append(f"{program}: {type(e).__name__}: {str(e)[-600:]}")
            continue
        choices = re.findall(r"\{([\w-]+(?:,[\w-]+)+)\}", text)
        subcommands = set(choices[0].split(",")) if choices else set()
        for (prog, first), options in used.items():
            if prog != program or not options:
                continue
            listed_text = python_help(program, monkeypatch, first) if first in subcommands else text
            listed = set(re.findall(r"(?<![\w-])--[\w-]+", listed_text))
            bad += [f"{where}: {program}{' ' + first if first in subcommands else ''} has no option {option}"
                    for option, where in options.items() if option not in listed and option != "--help"]
    assert not bad, "\n".join(bad)


def test_every_tool_and_bench_script_runs_by_its_path():
    """The docs also show ``tools/x.py ...`` alone: every script (a ``__main__`` block) has a
    ``python3`` shebang and the executable bit (git keeps it)."""
    scripts = [p for p in [*REPO.glob("tools/*.py"), *REPO.glob("bench/*.py")] if _MAIN.search(p.read_text(encoding="utf-8"))]
    assert len(scripts) >= 40
    bad = [str(p.relative_to(REPO)) for p in scripts
           if not os.access(p, os.X_OK) or not p.read_text(encoding="utf-8").startswith("#!/usr/bin/env python3\n")]
    assert not bad, bad


def test_every_documented_bash_command_exists_and_takes_the_options_shown():
    recipes = recipe_options()
    bad = []
    for c in documented_commands():
        if not c.program.startswith("bash "):
            continue
        script = c.program.split()[1]
        if script == "run.sh":  # the top-level run.sh (the digits recipe), or a recipe's own in its folder
            bad += [f"{c.where}: no recipe's run.sh takes {o}" for o in c.options if o not in recipes]
        elif not (REPO / script).is_file():
            bad.append(f"{c.where}: {script}: no such file")
    assert not bad, "\n".join(bad)
