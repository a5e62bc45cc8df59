"""The shape of src/: imports go one way, the pass and the core know nothing of ops.

The architecture (docs/explanation/architecture.md) is a line of layers: the charm, the
leader's pass, then the packages from Juju down to GARM. A module may import its own
package and the layers below it, never one above, and no package's modules import each
other in a circle. These tests read every module's imports (``ast``, nothing is run) so
that a change that bends the shape fails here, naming the import.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
# From the top down: each may use those after it, never those before.
LAYERS = ("charm", "leader", "juju", "observe", "scalesets", "runners", "garm")
# The pass and everything below Juju run without ops: they take values, not events.
OPS_FREE = ("leader", "observe", "scalesets", "runners", "garm")
MAX_MODULE_LINES = 1100
MAX_CHARM_LINES = 250
MAX_CHARM_CLASS_LINES = 150


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the charm by its dotted name."""
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(p for p in parts if p != "__init__"), path


def imported(path: Path) -> Iterator[tuple[str, int]]:
    """The modules ``path`` imports, absolute names, with the line of each import.

    Static imports only, relative ones resolved; an ``importlib`` call is not seen, which
    is why the pass's import is also checked by running it
    (``test_importing_the_pass_loads_no_ops``).
    """
    # The package a relative import starts from: a module's, or an __init__'s own.
    package = path.relative_to(SRC).with_suffix("").parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join((*base, *([node.module] if node.module else [])))
            if module:
                yield module, node.lineno
            # ``from garm import workload`` imports the module garm.workload.
            prefix = f"{module}." if module else ""
            yield from ((f"{prefix}{alias.name}", node.lineno) for alias in node.names)


def layer(name: str) -> str | None:
    top = name.split(".")[0]
    return top if top in LAYERS else None


MODULES = dict(modules())
OWN = set(MODULES)


def test_src_is_grouped_into_packages():
    packages = {name.split(".")[0] for name in MODULES if "." in name}
    assert packages == set(LAYERS) - {"charm", "leader"}
    assert {name for name in MODULES if "." not in name} == {*LAYERS} | {"charm", "leader"}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers_only(name: str):
    here = LAYERS.index(layer(name) or "")
    upward = [
        f"line {line}: {target}"
        for target, line in imported(MODULES[name])
        if (there := layer(target)) is not None and LAYERS.index(there) < here
    ]
    assert upward == [], f"{name} imports a layer above it"


def uses_ops(name: str) -> bool:
    return any(target.split(".")[0] == "ops" for target, _ in imported(MODULES[name]))


def closure(name: str) -> set[str]:
    """The charm's own modules ``name`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for target, _ in imported(MODULES[todo.pop()]):
            if target in OWN and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("name", sorted(n for n in MODULES if layer(n) in OPS_FREE))
def test_the_pass_and_the_core_do_not_import_ops(name: str):
    # Nor through a module of the charm's that does (third-party libraries aside).
    through = sorted(m for m in closure(name) | {name} if uses_ops(m))
    assert through == [], f"{name} imports ops through {through}"


def test_importing_the_pass_loads_no_ops():
    # Run, not read: whatever the pass and the layers below Juju import, ops stays out.
    ops_free = sorted(n for n in MODULES if layer(n) in OPS_FREE and n != "observe.cos_agent")
    code = (
        f"import sys\nfor name in {ops_free!r}:\n    __import__(name)\nprint('ops' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": f"{SRC}:{SRC.parent / 'lib'}"}
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert ran.stdout.strip() == "False"


def test_no_package_imports_itself_in_a_circle():
    graph = {
        name: {t for t, _ in imported(path) if t in OWN and t != name and layer(t) == layer(name)}
        for name, path in MODULES.items()
    }
    # A package imports its own modules; a module importing its package's __init__ is
    # not a dependency on its siblings.
    graph = {name: {t for t in targets if "." in t} for name, targets in graph.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import circle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


@pytest.mark.parametrize("package", sorted(set(LAYERS) - {"charm", "leader"}))
def test_each_package_says_what_it_holds_and_what_it_may_use(package: str):
    docstring = ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text())) or ""
    assert "Holds" in docstring and "May use" in docstring


def test_no_module_is_too_long_to_read():
    long = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert {n: lines for n, lines in long.items() if lines > MAX_MODULE_LINES} == {}


def test_the_charm_stays_a_thin_shell():
    source = (SRC / "charm.py").read_text()
    assert len(source.splitlines()) <= MAX_CHARM_LINES
    (charm,) = [
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "GarmCharm"
    ]
    assert charm.end_lineno is not None
    assert charm.end_lineno - charm.lineno + 1 <= MAX_CHARM_CLASS_LINES
