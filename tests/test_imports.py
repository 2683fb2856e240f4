"""The package's layering, checked on the import statements of every module.

docs/architecture.md section 1 gives the rules: the shared pieces (the
package root's modules, ``superfabric.formats``, ``superfabric.network``) import the standard
library only (and networkx, for the deadlock check); the golden model never imports Amaranth, directly or through
another module; the RTL never imports the model; the testbench never
imports the command line, and its cocotb modules not Amaranth; and no
module imports itself through others.

Every import statement counts, those inside functions too: a lazy import is
still a dependency, only a later one. The modules are every ``.py`` file of
every package ``pyproject.toml`` lists.
"""

import ast
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _packages() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]


def _modules() -> dict[str, Path]:
    """Module name -> source file, for every module of every package."""
    found = {}
    for package in _packages():
        spec = importlib.util.find_spec(package)
        folder = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(folder.glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> tuple[set[str], set[str]]:
    """What ``name`` imports: (modules of the package, top-level names of other distributions)."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    inside, outside = set(), set()

    def add(target: str) -> None:
        if target == "superfabric" or target.startswith("superfabric."):
            inside.add(target)
        else:
            outside.add(target.partition(".")[0])

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module
            for alias in node.names:
                # `from pkg import mod` imports the module; `from mod import name` the module.
                sub = f"{source}.{alias.name}"
                add(sub if sub in MODULES else source)
    return inside, outside


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _parents(name: str) -> list[str]:
    """The packages Python runs before ``name``: ``superfabric``, ``superfabric.sim``, ..."""
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


def _reach(name: str) -> dict[str, list[str]]:
    """Every module importing ``name`` runs, with the chain of imports that leads to it."""
    chains = {name: [name]}
    todo = [name]
    while todo:
        here = todo.pop()
        for there in sorted(IMPORTS[here][0] | set(_parents(here))):
            if there in MODULES and there not in chains:
                chains[there] = chains[here] + [there]
                todo.append(there)
    return chains


def _in(package: str, name: str) -> bool:
    return name == package or name.startswith(package + ".")


def _layer(prefix: str) -> list[str]:
    return [name for name in MODULES if _in(prefix, name)]


#: The package root's own modules (the folder config/), the formats and the network.
SHARED = [name for name, path in MODULES.items()
          if path.parent == MODULES["superfabric"].parent or _in("superfabric.formats", name)
          or _in("superfabric.network", name)]


#: Packages of data alone (pyproject.toml installs them for their files): no code.
DATA_PACKAGES = {"superfabric.presets": "*.toml"}


def test_every_package_has_modules():
    for package in _packages():
        if package in DATA_PACKAGES:
            assert not any(_in(package, name) for name in MODULES), package
            folder = Path(next(iter(importlib.util.find_spec(package).submodule_search_locations)))
            assert list(folder.glob(DATA_PACKAGES[package])), package
            continue
        assert any(_in(package, name) for name in MODULES), package
    assert {"superfabric.formats.rdma_wire", "superfabric.formats.lfsr", "superfabric.sim.fabric.core",
            "superfabric.hdl.switch", "superfabric.tb.trace_tb", "superfabric.network.routing",
            "superfabric.hdl.rdma.engine", "superfabric.sim.rdma.kernels.engine",
            "superfabric.tb.rdma.testbench", "superfabric.tools.report.build"} <= set(MODULES)


#: What the shared pieces may import besides the standard library (the deadlock check's graphs).
SHARED_DEPENDENCIES = {"networkx"}


@pytest.mark.parametrize("name", SHARED)
def test_shared_pieces_import_nothing_of_the_rtl_or_the_model(name):
    inside, outside = IMPORTS[name]
    allowed = set(sys.stdlib_module_names) | SHARED_DEPENDENCIES
    assert outside <= allowed, (name, outside - allowed)
    assert all(target in SHARED for target in inside), (name, inside - set(SHARED))


@pytest.mark.parametrize("name", _layer("superfabric.sim"))
def test_model_never_imports_amaranth(name):
    for module, chain in _reach(name).items():
        forbidden = IMPORTS[module][1] & {"amaranth", "cocotb", "cocotb_tools"}
        assert not forbidden, f"{' -> '.join(chain)} imports {', '.join(sorted(forbidden))}"
        assert not any(_in(p, module) for p in ("superfabric.hdl", "superfabric.tb",
                                                 "superfabric.tools")), " -> ".join(chain)


@pytest.mark.parametrize("name", _layer("superfabric.hdl"))
def test_rtl_never_imports_the_model(name):
    for module, chain in _reach(name).items():
        assert not any(_in(p, module) for p in ("superfabric.sim", "superfabric.tb",
                                                 "superfabric.tools")), " -> ".join(chain)
        assert "cocotb" not in IMPORTS[module][1], " -> ".join(chain)


@pytest.mark.parametrize("name", ["superfabric.tb.trace_tb", "superfabric.tb.rdma.testbench",
                                  "superfabric.tb.rdma.hosted_testbench",
                                  "superfabric.tb.skid_buffer_tb", "superfabric.tb.stimulus.testbench",
                                  "superfabric.tb.board.testbench"])
def test_cocotb_testbenches_do_not_load_amaranth(name):
    # They pack flits from superfabric.formats: a cocotb run starts without it.
    for module, chain in _reach(name).items():
        assert "amaranth" not in IMPORTS[module][1], " -> ".join(chain)


@pytest.mark.parametrize("name", _layer("superfabric.tb"))
def test_testbench_never_imports_the_command_line(name):
    for module, chain in _reach(name).items():
        assert not _in("superfabric.tools", module), " -> ".join(chain)


def test_no_import_cycle():
    # Depth-first search over the explicit imports; a module met again while
    # it is still on the path closes a cycle.
    state, path, cycles = {}, [], []

    def visit(name):
        state[name] = "open"
        path.append(name)
        for there in sorted(IMPORTS[name][0]):
            if there not in MODULES:
                continue
            if state.get(there) == "open":
                cycles.append(path[path.index(there):] + [there])
            elif there not in state:
                visit(there)
        path.pop()
        state[name] = "done"

    for name in MODULES:
        if name not in state:
            visit(name)
    assert not cycles, "; ".join(" -> ".join(c) for c in cycles)


def test_model_runs_without_amaranth_loaded():
    # The static check above cannot see an import made by name at run time.
    names = _layer("superfabric.sim")
    code = (f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in ('amaranth', 'cocotb')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
