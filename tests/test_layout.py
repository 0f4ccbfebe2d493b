"""The package reads as a map: small modules, one way to write a file atomically, an
import graph without cycles, and ``asrkit/bin/`` as the only place that sees the command line.

The import rules are computed from the code: every ``asrkit/**/*.py`` is parsed with
:mod:`ast` and each ``import`` / ``from ... import`` (and ``importlib.import_module`` of a
literal name) is read wherever it stands (module level, inside functions and classes, under
``try``, and under ``if TYPE_CHECKING:``: an import made only for type hints still makes the
two modules read each other, so a cycle closed through one is a cycle).  An import is an edge to the
module it names -- ``from a import b`` names ``a.b`` when that is a submodule -- and not to
the packages above it (Python runs their ``__init__`` first, but a package that names its
submodules' contents in its ``__init__`` makes no cycle by that).  The checking functions
take the folder that holds the package, so the tests at the end plant small fake packages
that break each rule and see it reported.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Optional

from tests.helpers import REPO

MAX_LINES = 400
PACKAGE = "asrkit"
ATOMIC_WRITER_SCOPE = ("asrkit", "tools", "examples")


def test_every_module_stays_under_400_lines():
    too_long = {str(p.relative_to(REPO)): n for p in sorted(Path(REPO, "asrkit").rglob("*.py"))
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


def test_one_atomic_writer():
    """Temp-file-and-rename writes go through asrkit.files, nowhere else (the package,
    the tools and the recipes' scripts)."""
    rename = re.compile(r"\b(os\.replace|os\.rename|\w*tmp\w*\.(replace|rename))\(")
    writers = [str(p.relative_to(REPO)) for folder in ATOMIC_WRITER_SCOPE
               for p in sorted(Path(REPO, folder).rglob("*.py"))
               if rename.search(p.read_text(encoding="utf-8")) and p.name != "files.py"]
    assert not writers, writers


# ----------------------------------------------------------------------------- the import graph


@dataclasses.dataclass(frozen=True)
class Import:
    """One import statement of module ``source`` (``where`` = ``path:line``) that names
    module ``target`` (for ``from a import b``: ``a.b`` when that is a module, else ``a``)."""

    source: str
    target: str
    where: str


def package_modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file of every module of ``root/package`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
           (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(tree: ast.AST, type_checking: bool = True) -> list[ast.AST]:
    """Every node of ``tree`` that has a line, in line order; without ``type_checking``, not
    those in the bodies of ``if TYPE_CHECKING:`` (which never run; their ``else`` does)."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return sorted((n for n in out if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))


def _named(module: str, is_package: bool, node: ast.AST) -> list[str]:
    """The absolute dotted names an import node reads (``a.b`` and ``a.b.c`` for
    ``from a.b import c``: which of them is a module is decided by the caller), including
    ``importlib.import_module("a.b")`` and ``__import__("a.b")`` with a literal name."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str) and (
            (isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module")) or
            (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")):
        return [node.args[0].value]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's package, one level up per extra dot
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]


def package_imports(root: Path, package: str = PACKAGE) -> list[Import]:
    """Every import of a module of ``root/package`` by a module of it (``if TYPE_CHECKING:``
    ones included), in file and line order.  ``from a import b`` names ``a.b`` when that
    is a module (a submodule), else ``a``; a dotted name that is no module of the package
    names its longest prefix that is one."""
    modules = package_modules(root, package)
    out = []
    for source, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node in _statements(tree):
            names = _named(source, is_package, node)
            if isinstance(node, ast.ImportFrom):
                submodules = [n for n in names[1:] if n in modules]
                names = submodules + ([names[0]] if len(submodules) < len(names) - 1 else [])
            for name in names:
                target = _owning_module(name, modules)
                if target is not None:
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    out.append(Import(source, target, where))
    return out


def _owning_module(name: str, modules: dict[str, Path]) -> Optional[str]:
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or None


def import_cycles(root: Path, package: str = PACKAGE) -> list[list[Import]]:
    """One cycle (the imports along it, a shortest one through its first module) per
    strongly connected part of the package's import graph that has one; a module importing
    itself is a cycle of one import."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in package_imports(root, package):
        edges.setdefault(imp.source, {}).setdefault(imp.target, imp)
    reach = {node: _reachable(node, edges) for node in edges}
    cycles, seen = [], set()
    for start in sorted(edges):
        if start in seen or start not in reach[start]:
            continue
        seen.update(m for m in reach[start] if start in reach.get(m, ()))
        cycles.append(_shortest_cycle(start, edges))
    return cycles


def _reachable(start: str, edges: dict[str, dict[str, Import]]) -> set[str]:
    out, stack = set(), [start]
    while stack:
        for target in edges.get(stack.pop(), {}):
            if target not in out:
                out.add(target)
                stack.append(target)
    return out


def _shortest_cycle(start: str, edges: dict[str, dict[str, Import]]) -> list[Import]:
    """The imports of a shortest path ``start`` -> ... -> ``start`` (breadth first); the
    caller knows there is one."""
    previous: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for target, imp in sorted(edges.get(node, {}).items()):
                if target == start:
                    path = [imp]
                    while path[0].source != start:
                        path.insert(0, previous[path[0].source])
                    return path
                if target not in previous:
                    previous[target] = imp
                    nxt.append(target)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")


def describe_cycle(cycle: list[Import]) -> str:
    return " -> ".join(f"{imp.source} ({imp.where})" for imp in cycle) + f" -> {cycle[0].source}"


def imports_below_bin(root: Path, forbidden: str, package: str = PACKAGE) -> list[str]:
    """``path:line`` of every import of ``forbidden`` (a module and its submodules,
    ``from``-forms included) by a module of ``root/package`` outside ``package.bin``."""
    out = []
    for source, path in package_modules(root, package).items():
        if source == f"{package}.bin" or source.startswith(f"{package}.bin."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _statements(tree):
            names = _named(source, path.name == "__init__.py", node)
            if any(n == forbidden or n.startswith(forbidden + ".") for n in names):
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def script_imports(root: Path, folder: str, forbidden: tuple[str, ...]) -> list[str]:
    """``path:line`` of every import, by a module of ``root/folder`` (the scripts of
    ``tools/``), of a module named by ``forbidden`` or below it."""
    out = []
    for path in sorted((root / folder).rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _statements(tree):
            names = _named(module, path.name == "__init__.py", node)
            if any(n == f or n.startswith(f + ".") for n in names for f in forbidden):
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


# tools/ are scripts over the library: the benchmarks use them, not the other way round, and a
# tool calls the library (or runs another tool's command), never the command-line layer
TOOLS_MAY_NOT_IMPORT = ("bench", f"{PACKAGE}.bin")


def test_the_import_graph_has_no_cycle():
    """Function-level imports included: a cycle hidden inside a function is still a cycle."""
    cycles = import_cycles(REPO)
    assert not cycles, "import cycles:\n  " + "\n  ".join(describe_cycle(c) for c in cycles)


def test_nothing_below_bin_imports_bin():
    """``asrkit/bin/`` is the adapter from the command line to the library, never a library."""
    found = imports_below_bin(REPO, f"{PACKAGE}.bin")
    assert not found, f"{PACKAGE}.bin imported outside {PACKAGE}/bin/: {found}"


def test_tools_import_neither_bench_nor_bin():
    found = script_imports(REPO, "tools", TOOLS_MAY_NOT_IMPORT)
    assert not found, f"tools/ importing {' or '.join(TOOLS_MAY_NOT_IMPORT)}: {found}"


def test_nothing_below_bin_imports_argparse():
    """Only ``asrkit/bin/`` parses arguments; the library takes typed values."""
    found = imports_below_bin(REPO, "argparse")
    assert not found, f"argparse imported outside {PACKAGE}/bin/: {found}"


# ----------------------------------------------------------------------------- the rules, broken on purpose


def undeclared_deferred_imports(root: Path, package: str = PACKAGE) -> list[str]:
    """``path:line`` of each import of a module of ``package`` inside a function (outside
    ``if TYPE_CHECKING:``) that neither its lines nor the import and comment lines just above
    it say what it defers: a function-level import is kept only to defer a heavy dependency (the comment
    names it, with the word "defer")."""
    found = []
    for module, path in package_modules(root, package).items():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in _statements(func, type_checking=False):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno == func.lineno:
                    continue
                names = _named(module, path.name == "__init__.py", node)
                if not any(n == package or n.startswith(package + ".") for n in names):
                    continue
                if not _says_defer(lines, node.lineno - 1, node.end_lineno):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(set(found))


def _says_defer(lines: list[str], first: int, end: int) -> bool:
    """Whether lines ``first..end`` (0-based, end excluded) or the run of import, comment and
    blank lines just above them say "defer"."""
    while first > 0 and (not lines[first - 1].strip() or lines[first - 1].lstrip().startswith(("#", "import ", "from "))):
        first -= 1
    return any("defer" in line.lower() for line in lines[first:end])


def test_function_level_imports_say_what_they_defer():
    found = undeclared_deferred_imports(REPO)
    assert not found, f"function-level imports of {PACKAGE} modules without a comment saying what they defer " \
                      f"(hoist them to the module's top, or say which heavy dependency they defer): {found}"


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


CLEAN = {
    "asrkit/__init__.py": "",
    "asrkit/low.py": "import os\n",
    "asrkit/high.py": "from asrkit import low\nfrom asrkit.low import os\n",
    "asrkit/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from asrkit.low import X\n",
    "asrkit/bin/__init__.py": "",
    "asrkit/bin/tool.py": "import argparse\nfrom asrkit import high\nfrom . import helper\n",
    "asrkit/bin/helper.py": "from argparse import Namespace\n",
}


def test_a_clean_package_passes_every_rule(tmp_path):
    root = _plant(tmp_path, CLEAN)
    assert import_cycles(root) == []
    assert imports_below_bin(root, "asrkit.bin") == [] and imports_below_bin(root, "argparse") == []


def test_a_cycle_through_a_function_level_import_is_reported(tmp_path):
    root = _plant(tmp_path, {**CLEAN, "asrkit/low.py": "import os\n\ndef f():\n    from asrkit.high import g\n"})
    [cycle] = import_cycles(root)
    assert describe_cycle(cycle) in ("asrkit.high (asrkit/high.py:1) -> asrkit.low (asrkit/low.py:4) -> asrkit.high",
                                     "asrkit.low (asrkit/low.py:4) -> asrkit.high (asrkit/high.py:1) -> asrkit.low")


def test_cycles_through_submodule_and_relative_imports_are_reported(tmp_path):
    files = {**CLEAN, "asrkit/pkg/__init__.py": "", "asrkit/pkg/a.py": "from . import b\n",
             "asrkit/pkg/b.py": "from asrkit.pkg import a\n", "asrkit/self.py": "import asrkit.self\n",
             "asrkit/pkg/deep/__init__.py": "", "asrkit/pkg/deep/c.py": "from ..d import x\n",
             "asrkit/pkg/d.py": "from .deep import c\n"}
    cycles = [describe_cycle(c) for c in import_cycles(_plant(tmp_path, files))]
    assert cycles == ["asrkit.pkg.a (asrkit/pkg/a.py:1) -> asrkit.pkg.b (asrkit/pkg/b.py:1) -> asrkit.pkg.a",
                      "asrkit.pkg.d (asrkit/pkg/d.py:1) -> asrkit.pkg.deep.c (asrkit/pkg/deep/c.py:1) -> asrkit.pkg.d",
                      "asrkit.self (asrkit/self.py:1) -> asrkit.self"]


def test_a_cycle_closed_through_a_type_checking_import_is_reported(tmp_path):
    """``decode/`` once read as one circle closed by type-hint imports; so does this plant."""
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from asrkit.hinted import X\n"
    [cycle] = import_cycles(_plant(tmp_path, {**CLEAN, "asrkit/typed.py": typed, "asrkit/hinted.py": "import asrkit.typed\n"}))
    assert {imp.where for imp in cycle} == {"asrkit/typed.py:3", "asrkit/hinted.py:1"}


def test_a_tool_importing_bench_or_bin_is_reported(tmp_path):
    files = {**CLEAN, "tools/__init__.py": "", "tools/ok.py": "from asrkit import high\nfrom tools import ok\n",
             "tools/packs.py": "from bench.gpu_stages.corpus import pack_corpus\n",
             "tools/runs.py": "def main():\n    from asrkit.bin import tool\n",
             "tools/benchmark_name.py": "import benchmarks\n"}  # (not bench)
    found = script_imports(_plant(tmp_path, files), "tools", TOOLS_MAY_NOT_IMPORT)
    assert found == ["tools/packs.py:1", "tools/runs.py:2"]


def test_every_form_of_importing_bin_below_bin_is_reported(tmp_path):
    files = {**CLEAN, "asrkit/lib/__init__.py": "",
             "asrkit/lib/a.py": "import asrkit.bin.tool\n",
             "asrkit/lib/b.py": "def f():\n    from asrkit.bin.tool import main\n",
             "asrkit/lib/c.py": "from asrkit import bin\n",
             "asrkit/lib/d.py": "from ..bin import tool\n",
             "asrkit/lib/e.py": "import asrkit.binary_search, asrkit.high\n"}  # (not asrkit.bin)
    found = imports_below_bin(_plant(tmp_path, files), "asrkit.bin")
    assert found == ["asrkit/lib/a.py:1", "asrkit/lib/b.py:2", "asrkit/lib/c.py:1", "asrkit/lib/d.py:1"]


def test_argparse_below_bin_is_reported(tmp_path):
    files = {**CLEAN, "asrkit/lib.py": "import argparse\n",
             "asrkit/other.py": "def f():\n    from argparse import Namespace\n"}
    assert imports_below_bin(_plant(tmp_path, files), "argparse") == ["asrkit/lib.py:1", "asrkit/other.py:2"]


def test_a_function_level_import_must_say_what_it_defers(tmp_path):
    files = {**CLEAN, "asrkit/lazy.py": "def f():\n    from asrkit import low\n\n"
                                         "def g():\n    # (deferred: torch)\n    from asrkit import high\n"}
    assert undeclared_deferred_imports(_plant(tmp_path, files)) == ["asrkit/lazy.py:2"]


def test_the_suite_collects_every_test_file():
    """A test folder pytest does not recurse into (its default ``norecursedirs`` holds
    ``dist``, ``build``, ...) would drop its tests from the suite without a word."""
    import subprocess
    import sys
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-p", "no:xdist"], cwd=REPO, capture_output=True, text=True, timeout=120)
    collected = {line.split("::")[0] for line in listed.stdout.splitlines() if "::" in line}
    files = {str(p.relative_to(REPO)) for p in Path(REPO, "tests").rglob("test_*.py")}
    assert files <= collected, f"test files the suite does not collect: {sorted(files - collected)}"
