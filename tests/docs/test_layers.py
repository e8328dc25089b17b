"""The package's imports against the layering docs/design.md declares: every import (module level or inside a
function) goes to a lower layer, and no import makes a circle.  A module missing from the declaration fails too,
so the declaration stays the whole picture."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dualbroadcast"
DESIGN = ROOT / "docs" / "design.md"

# Imports that still run up a layer, each with its reason; this table may only shrink.
UP_IMPORTS = {}


def declared_layers():
    """{top-level module or package name: layer number} from docs/design.md's block of layers."""
    block = re.search(r"```text\n# layers, bottom first\n(.*?)```", DESIGN.read_text(), re.S).group(1)
    return {name: k for k, line in enumerate(block.strip().splitlines()) for name in line.split(":")[1].split()}


def module_name(path):
    """``rules.shape`` for dualbroadcast/rules/shape.py, ``rules`` for its __init__.py."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def imports_of(path):
    """The package modules ``path`` imports, as names like ``tape`` or ``rules.linalg``."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" and len(here) > 1 else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)]
            if node.module:
                found.add(".".join(base + node.module.split(".")))
            else:
                found.update(".".join(base + [alias.name]) for alias in node.names)
    return {name for name in found if name and name != module_name(path)}


def import_graph():
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(modules)

    def resolved(name):
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in known else None

    return {m: {resolved(t) for t in imports_of(p)} - {None, m} for m, p in modules.items()}


def layer(name, layers):
    return layers[name.split(".")[0]]


def test_every_module_is_declared_in_a_layer():
    layers = declared_layers()
    missing = sorted(m for m in import_graph() if m.split(".")[0] not in layers)
    assert not missing, f"add these modules to the layers of docs/design.md: {missing}"


def test_imports_go_down_the_declared_layers():
    layers = declared_layers()
    up = []
    for module, targets in import_graph().items():
        for target in targets:
            same_package = "." in module and target.split(".")[0] == module.split(".")[0]
            if layer(target, layers) < layer(module, layers) or same_package:
                continue
            if (module, target) not in UP_IMPORTS:
                up.append(f"{module} -> {target}")
    assert not up, f"imports that do not go down the layers of docs/design.md: {sorted(up)}"


def test_the_exceptions_still_exist():
    """An exception the code no longer needs is removed from the table (it may only shrink)."""
    graph = import_graph()
    stale = [pair for pair in UP_IMPORTS if pair[1] not in graph.get(pair[0], ())]
    assert not stale, f"remove from UP_IMPORTS: {stale}"


def test_no_import_circle_but_the_declared_exceptions():
    graph = {m: {t for t in ts if (m, t) not in UP_IMPORTS} for m, ts in import_graph().items()}
    state = {}

    def visit(m, path):
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                raise AssertionError(f"import circle: {' -> '.join(path + [m, t])}")
            if t not in state:
                visit(t, path + [m])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
