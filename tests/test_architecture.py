"""Architecture rules of the societas packages, checked on the source with `ast`.

The four layers depend in one direction only (agents <- topology <- marl <- evolve),
no module takes part in an import cycle, no module reaches into another module's
private names, nothing imports the old top-level names, imports sit at the top of
their module unless they load an optional dependency, and library modules leave
the matplotlib backend to the program that runs them. Each checker is a plain
function over a set of modules, so the tests at the bottom also prove that every
checker reports a violation planted in a tiny synthetic package.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "societas"
# Order is the layer order: a layer may import only the layers before it.
LAYERS = ("agents", "topology", "marl", "evolve")
# Standalone task programs, loaded by path rather than imported as modules.
EXCLUDED_DIRS = (Path("evolve") / "tasks",)
SCRIPT_DIRS = ("tests", "examples", "benchmarks")
# Distribution names whose import name differs from the distribution name.
IMPORT_NAMES = {
    "open-spiel": ("pyspiel", "open_spiel"),
    "pyyaml": ("yaml",),
    "pettingzoo": ("pettingzoo",),
    "mpe2": ("mpe2",),
}


@dataclass(frozen=True)
class Import:
    """One imported module (or one name of a `from` import) of one module."""

    importer: str
    path: Path
    line: int
    module: str  # the module as written, absolute (relative imports resolved)
    target: str  # the module the import loads: a submodule for `from pkg import submodule`
    name: str | None  # the imported name of a `from` import
    function_level: bool
    type_checking: bool = False  # under `if TYPE_CHECKING:`, never executed
    lazy_export: bool = False  # inside a package's module-level __getattr__ (PEP 562)

    def where(self) -> str:
        return f"{self.importer} ({self.path}:{self.line})"


def discover_modules(root: Path, packages: tuple[str, ...] = LAYERS) -> dict[str, Path]:
    """Map each module name of the packages under `root` to its file."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if any(rel.is_relative_to(excluded) for excluded in EXCLUDED_DIRS):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([NAMESPACE, *parts])] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    parts = importer.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


class _ImportVisitor(ast.NodeVisitor):
    def __init__(self, importer: str, path: Path, is_package: bool, known: set[str]) -> None:
        self.importer = importer
        self.path = path
        self.is_package = is_package
        self.known = known
        self.depth = 0
        self.type_checking = 0
        self.lazy = 0
        self.imports: list[Import] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        lazy = self.is_package and self.depth == 0 and getattr(node, "name", None) == "__getattr__"
        self.depth += 1
        self.lazy += lazy
        self.generic_visit(node)
        self.lazy -= lazy
        self.depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        if not guarded:
            self.generic_visit(node)
            return
        self.type_checking += 1
        for child in node.body:
            self.visit(child)
        self.type_checking -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imports.append(
                Import(
                    self.importer,
                    self.path,
                    node.lineno,
                    alias.name,
                    alias.name,
                    None,
                    self.depth > 0,
                    self.type_checking > 0,
                    self.lazy > 0,
                )
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            module = _resolve_relative(self.importer, self.is_package, node.level, node.module)
        else:
            module = node.module or ""
        for alias in node.names:
            submodule = f"{module}.{alias.name}"
            target = submodule if submodule in self.known else module
            self.imports.append(
                Import(
                    self.importer,
                    self.path,
                    node.lineno,
                    module,
                    target,
                    alias.name,
                    self.depth > 0,
                    self.type_checking > 0,
                    self.lazy > 0,
                )
            )


def collect_imports(modules: dict[str, Path], known: set[str] | None = None) -> list[Import]:
    """Every import of every module, at module level and inside functions."""
    known = set(modules) if known is None else known
    imports: list[Import] = []
    for name, path in modules.items():
        visitor = _ImportVisitor(name, path, _is_package(path), known)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        imports.extend(visitor.imports)
    return imports


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == NAMESPACE and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return None


def layer_violations(imports: list[Import]) -> list[str]:
    """Imports of a layer that comes after the importing module's own layer."""
    found = []
    for imp in imports:
        own, other = _layer(imp.importer), _layer(imp.target)
        if own is not None and other is not None and other > own:
            found.append(f"{imp.where()} imports {imp.target}: {LAYERS[own]} may not import {LAYERS[other]}")
    return found


def import_cycles(imports: list[Import], modules: dict[str, Path]) -> list[str]:
    """Cycles of the import graph among the given modules, each with the lines that close it.

    An import under ``if TYPE_CHECKING:`` is left out: it names a type for the
    annotations and never runs, so it cannot take part in an import cycle.
    """
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    lines: dict[tuple[str, str], Import] = {}
    for imp in imports:
        if imp.target in modules and imp.target != imp.importer and not imp.type_checking:
            graph.add_edge(imp.importer, imp.target)
            lines.setdefault((imp.importer, imp.target), imp)
    found = []
    for cycle in nx.simple_cycles(graph):
        steps = []
        for i, module in enumerate(cycle):
            imp = lines[(module, cycle[(i + 1) % len(cycle)])]
            steps.append(f"{imp.where()} -> {imp.target}")
        found.append("cycle: " + "; ".join(steps))
    return sorted(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(imports: list[Import]) -> list[str]:
    """`from other import _name`, and imports of a private societas submodule, across modules."""
    found = []
    for imp in imports:
        private_name = imp.name is not None and _private(imp.name)
        parts = imp.module.split(".")
        private_module = parts[0] == NAMESPACE and any(_private(part) for part in parts)
        if (private_name or private_module) and imp.module != imp.importer and imp.module != "__future__":
            found.append(f"{imp.where()} imports private {imp.module}.{imp.name or ''}".rstrip("."))
    return found


def old_name_imports(imports: list[Import]) -> list[str]:
    """Imports of the layers under their old top-level names instead of societas.<layer>."""
    return [
        f"{imp.where()} imports {imp.module}: use {NAMESPACE}.{imp.module}"
        for imp in imports
        if imp.module.split(".")[0] in LAYERS
    ]


def core_import_names(pyproject: Path) -> set[str]:
    """Import names of the [project] dependencies of a pyproject.toml."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    names: set[str] = set()
    for requirement in data["project"]["dependencies"]:
        dist = re.match(r"[A-Za-z0-9_.\-]+", requirement.strip())
        assert dist is not None, requirement
        key = dist.group(0).lower()
        names.update(IMPORT_NAMES.get(key, (key.replace("-", "_"),)))
    return names


def function_level_imports(imports: list[Import], core: set[str]) -> list[str]:
    """Imports inside functions of anything but an optional dependency (one line per statement).

    A package's module-level ``__getattr__`` may import its own heavy submodules on
    first use (PEP 562 lazy exports): ``import societas.agents`` must stay light
    enough for sandboxed programs, which run under a memory limit.
    """
    found: dict[str, None] = {}
    for imp in imports:
        if not imp.function_level or (imp.lazy_export and imp.module.startswith(NAMESPACE + ".")):
            continue
        top = imp.module.split(".")[0]
        if top == NAMESPACE or top in core or top in sys.stdlib_module_names:
            found[f"{imp.where()} imports {imp.module} inside a function: move it to the top"] = None
    return list(found)


def matplotlib_use_calls(modules: dict[str, Path]) -> list[str]:
    """Calls of matplotlib.use(...), which library code leaves to the program."""
    found = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "use"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("matplotlib", "mpl")
            ):
                found.append(f"{name} ({path}:{node.lineno}) calls matplotlib.use")
    return found


def script_modules(root: Path, dirs: tuple[str, ...] = SCRIPT_DIRS) -> dict[str, Path]:
    """The Python files of tests/, examples/ and benchmarks/, named like modules."""
    modules = {}
    for directory in dirs:
        for path in sorted((root / directory).rglob("*.py")):
            modules[".".join(path.relative_to(root).with_suffix("").parts)] = path
    return modules


def _report(found: list[str]) -> str:
    return "\n".join(found)


# --- the rules, applied to the repository -----------------------------------------------------------


@pytest.fixture(scope="module")
def package_modules() -> dict[str, Path]:
    modules = discover_modules(ROOT)
    assert f"{NAMESPACE}.marl.games.cfr" in modules  # the walk found the tree
    return modules


@pytest.fixture(scope="module")
def package_imports(package_modules: dict[str, Path]) -> list[Import]:
    return collect_imports(package_modules)


@pytest.fixture(scope="module")
def script_imports(package_modules: dict[str, Path]) -> list[Import]:
    return collect_imports(script_modules(ROOT), known=set(package_modules))


def test_layers_import_only_earlier_layers(package_imports: list[Import]) -> None:
    found = layer_violations(package_imports)
    assert not found, "layer rule agents <- topology <- marl <- evolve broken:\n" + _report(found)


def test_no_import_cycles(package_imports: list[Import], package_modules: dict[str, Path]) -> None:
    found = import_cycles(package_imports, package_modules)
    assert not found, "import cycles among the package modules:\n" + _report(found)


def test_no_private_imports_in_packages(package_imports: list[Import]) -> None:
    found = private_imports(package_imports)
    assert not found, "private names imported from another module:\n" + _report(found)


def test_no_private_imports_in_tests_examples_benchmarks(script_imports: list[Import]) -> None:
    found = private_imports(script_imports)
    assert not found, "private names imported from another module:\n" + _report(found)


def test_no_old_top_level_names(package_imports: list[Import], script_imports: list[Import]) -> None:
    found = old_name_imports(package_imports + script_imports)
    assert not found, "old top-level package names imported:\n" + _report(found)


def test_function_level_imports_only_for_optional_dependencies(package_imports: list[Import]) -> None:
    core = core_import_names(ROOT / "pyproject.toml")
    assert {"torch", "yaml", "pyspiel", "matplotlib", "mpe2"} <= core
    found = function_level_imports(package_imports, core)
    assert not found, "function-level imports of core or internal modules:\n" + _report(found)


def test_library_modules_leave_matplotlib_backend_alone(package_modules: dict[str, Path]) -> None:
    found = matplotlib_use_calls(package_modules)
    assert not found, "library modules that choose the matplotlib backend:\n" + _report(found)


# --- each checker reports a violation planted in a synthetic package ---------------------------------


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return discover_modules(root)


def test_checker_reports_layer_violation(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "agents/__init__.py": "",
            "agents/agent.py": "from societas.topology.graph import Graph\n",
            "topology/__init__.py": "",
            "topology/graph.py": "import societas.agents.agent\nGraph = 1\n",
        },
    )
    found = layer_violations(collect_imports(modules))
    assert len(found) == 1
    assert "societas.agents.agent" in found[0] and "agent.py:1" in found[0]
    assert "agents may not import topology" in found[0]


def test_checker_reports_layer_violation_inside_function(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "topology/__init__.py": "",
            "topology/run.py": "def f():\n    from ..marl import train\n",
            "marl/__init__.py": "",
            "marl/train.py": "",
        },
    )
    found = layer_violations(collect_imports(modules))
    assert found == [
        f"societas.topology.run ({tmp_path / 'topology' / 'run.py'}:2) imports societas.marl.train: "
        "topology may not import marl"
    ]


def test_checker_reports_cycle_through_package_init(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "marl/__init__.py": "",
            "marl/games/__init__.py": "from .cfr import CFRSolver\n",
            "marl/games/cfr.py": "from societas.marl.games import helper\nCFRSolver = 1\n",
            "marl/games/helper.py": "",
        },
    )
    imports = collect_imports(modules)
    # `from societas.marl.games import helper` names a submodule, so it points at that submodule.
    assert import_cycles(imports, modules) == []
    modules = _write(tmp_path, {"marl/games/cfr.py": "from societas.marl.games import CFRSolver as X\n"})
    found = import_cycles(collect_imports(modules), modules)
    assert len(found) == 1
    assert "societas.marl.games.cfr" in found[0] and "cfr.py:1" in found[0]
    assert "societas.marl.games (" in found[0] and "__init__.py:1" in found[0]


def test_checker_reports_cycle_between_modules(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "evolve/__init__.py": "",
            "evolve/a.py": "def f():\n    from . import b\n",
            "evolve/b.py": "import societas.evolve.a\n",
        },
    )
    found = import_cycles(collect_imports(modules), modules)
    assert len(found) == 1
    assert "societas.evolve.a" in found[0] and "a.py:2" in found[0]
    assert "societas.evolve.b" in found[0] and "b.py:1" in found[0]


def test_checker_reports_private_import(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "agents/__init__.py": "from __future__ import annotations\n",
            "agents/a.py": "from __future__ import annotations\n_hidden = 1\n__all__ = []\n",
            "agents/b.py": (
                "from .a import __all__\nfrom .a import (\n    _hidden,\n)\nimport json as _json\n"
                "from torch._dynamo import config\nimport societas.agents._impl\n"
            ),
            "agents/_impl.py": "",
        },
    )
    found = private_imports(collect_imports(modules))
    b = tmp_path / "agents" / "b.py"
    assert found == [
        f"societas.agents.b ({b}:2) imports private societas.agents.a._hidden",
        f"societas.agents.b ({b}:7) imports private societas.agents._impl",
    ]


def test_checker_reports_old_top_level_name(tmp_path: Path) -> None:
    modules = _write(
        tmp_path, {"evolve/__init__.py": "", "evolve/x.py": "import marl.games\nfrom agents import Agent\n"}
    )
    found = old_name_imports(collect_imports(modules))
    assert [line.split(" imports ")[1] for line in found] == [
        "marl.games: use societas.marl.games",
        "agents: use societas.agents",
    ]


def test_checker_reports_function_level_import(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\ndependencies = ["open-spiel>=1", "PyYAML", "torch>=2"]\n', encoding="utf-8"
    )
    core = core_import_names(pyproject)
    assert core == {"pyspiel", "open_spiel", "yaml", "torch"}
    modules = _write(
        tmp_path,
        {
            "marl/__init__.py": "",
            "marl/x.py": (
                "import json\n"
                "def f():\n    import vllm\n    import pyspiel\n"
                "class C:\n    def g(self):\n        import os\n        from . import y\n"
            ),
            "marl/y.py": "",
        },
    )
    found = function_level_imports(collect_imports(modules), core)
    assert [line.split(") imports ")[0].rsplit(":", 1)[1] for line in found] == ["4", "7", "8"]
    assert "imports pyspiel inside a function" in found[0]


def test_checker_reports_matplotlib_use(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "marl/__init__.py": "",
            "marl/plots.py": "import matplotlib\n\ndef plot():\n    matplotlib.use('Agg')\n",
        },
    )
    found = matplotlib_use_calls(modules)
    assert found == [f"societas.marl.plots ({tmp_path / 'marl' / 'plots.py'}:4) calls matplotlib.use"]


def test_checker_leaves_type_checking_imports_out_of_cycles(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "agents/__init__.py": "",
            "agents/core.py": "from .results import Result\n",
            "agents/results.py": (
                "import typing\nfrom typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .core import Sandbox\n"
                "if typing.TYPE_CHECKING:\n    import societas.agents.core\nelse:\n    from . import core\n"
                "Result = 1\n"
            ),
        },
    )
    imports = collect_imports(modules)
    assert [
        (imp.line, imp.type_checking) for imp in imports if imp.importer == "societas.agents.results"
    ] == [
        (1, False),
        (2, False),
        (4, True),
        (6, True),
        (8, False),
    ]
    # Only the runtime import in the else branch closes a cycle.
    found = import_cycles(imports, modules)
    assert len(found) == 1 and "results.py:8" in found[0] and "results.py:4" not in found[0]
