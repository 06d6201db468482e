"""The package import graph of src/tessel, read statically (every `import` / `from ... import`
of every module, function-level and TYPE_CHECKING ones included): no cycle between tessel's
top-level packages / modules (`tessel.ops`, `tessel.schedule`, `tessel.driver`, the root
package `tessel` itself, ...), and no module imports a private name (`_name`, or a name from
a `_module`) of another top-level package: a stage hands the next one a value through
public names."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
PKG = SRC / "tessel"
ROOT = "tessel"  # the root package's own module (tessel/__init__.py)


@dataclass(frozen=True)
class Edge:
    importer: str  # dotted module name
    imported: str  # dotted module name (the root package: "tessel")
    name: str | None  # the name taken from it (`from m import name`), or None
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports(path: Path) -> list[Edge]:
    """Every tessel import of a module, wherever it is in the file."""
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [Edge(mod, a.name, None, node.lineno) for a in node.names
                    if a.name.split(".")[0] == ROOT]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != ROOT:
                continue
            for a in node.names:  # `from tessel.ops import conv_emit` imports a module
                sub = f"{target}.{a.name}"
                out.append(Edge(mod, sub, None, node.lineno) if _is_module(sub)
                           else Edge(mod, target, a.name, node.lineno))
    return out


def top(dotted: str) -> str:
    """`tessel.ops.conv_emit` -> `tessel.ops`; the root package stays `tessel`."""
    return ".".join(dotted.split(".")[:2])


def all_edges() -> list[Edge]:
    return [e for path in sorted(PKG.rglob("*.py")) for e in imports(path)]


def package_graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for e in edges:
        a, b = top(e.importer), top(e.imported)
        if a != b:
            graph.setdefault(a, set()).add(b)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (a list of nodes, first == last), or None."""
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def test_the_reader_sees_every_kind_of_import():
    """The static reader finds module-level, function-level and relative imports."""
    edges = {(e.importer, e.imported, e.name) for e in all_edges()}
    assert ("tessel.driver", "tessel.schedule.plan", "plan") in edges
    assert ("tessel.binary.codec", "tessel.isa", None) in edges  # `from tessel import isa`
    assert ("tessel", "tessel.driver", "compile") in edges  # a TYPE_CHECKING import
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_no_import_cycle_between_packages():
    graph = package_graph(all_edges())
    cycle = find_cycle(graph)
    if cycle:
        why = [f"{e.importer} imports {e.imported} (line {e.line})" for e in all_edges()
               for a, b in zip(cycle, cycle[1:], strict=False)
               if top(e.importer) == a and top(e.imported) == b]
        raise AssertionError(f"import cycle {' -> '.join(cycle)}:\n  " + "\n  ".join(why))


def test_no_private_name_from_another_package():
    bad = [f"{e.importer}:{e.line} imports {e.imported}" + (f".{e.name}" if e.name else "")
           for e in all_edges() if top(e.importer) != top(e.imported)
           and (any(_private(p) for p in e.imported.split("."))
                or (e.name is not None and _private(e.name)))]
    assert not bad, "private names imported across packages:\n  " + "\n  ".join(bad)


def private_uses(path: Path) -> list[str]:
    """`module._name` reads where `module` was imported (`import tessel.x.m as module`, `from
    tessel.x import m`) from another top-level package than this file's."""
    mod = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}  # local name -> the tessel module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(
                ".")[0] == ROOT:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if _is_module(sub):
                    aliases[a.asname or a.name] = sub
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name.split(".")[0] == ROOT:
                    aliases[a.asname] = a.name
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _private(node.attr)
                and top(aliases[node.value.id]) != top(mod)):
            out.append(f"{mod}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    return out


def test_no_private_name_of_another_package_read_through_its_module():
    bad = [u for path in sorted(PKG.rglob("*.py")) for u in private_uses(path)]
    assert not bad, "private names read across packages:\n  " + "\n  ".join(bad)


# The pipeline's stages, bottom to top (the design contract's layout): a package imports only
# packages below it. Utilities first; then the vocabulary every stage shares (the NPU's parameters, the
# IR, the instruction set, the binary format); the simulator (the NPU's semantics: it imports
# no compiler stage); the op definitions; then the compiler's stages in pipeline order, the
# runtime, the driver, and what is built on the driver.
ORDER = [
    {"tessel.errors", "tessel.version"},
    {"tessel.fileio", "tessel.quiet", "tessel.threads", "tessel.progress", "tessel.collector",
     "tessel.display"},
    {"tessel.arch"}, {"tessel.ir"}, {"tessel.isa"}, {"tessel.binary"}, {"tessel.sim"},
    {"tessel.ops"}, {"tessel.frontend"}, {"tessel.models"}, {"tessel.passes"}, {"tessel.quant"},
    {"tessel.prune"},
    {"tessel.lower"}, {"tessel.schedule"}, {"tessel.emit"}, {"tessel.runtime"},
    {"tessel.export"}, {"tessel.driver"}, {"tessel.torch_backend"}, {"tessel.analysis"},
    {"tessel.scenario"}, {"tessel.codesign"},
    {"tessel.cli"}, {"tessel.demo", "tessel.__main__"}, {"tessel"},
]
LEVEL = {pkg: i for i, layer in enumerate(ORDER) for pkg in layer}


def test_every_package_has_a_place_in_the_order():
    missing = sorted({top(_module_name(p)) for p in PKG.rglob("*.py")} - set(LEVEL))
    assert not missing, f"add these packages to ORDER: {missing}"


def test_imports_point_down_the_pipeline():
    """Every import (module-level, function-level, TYPE_CHECKING) goes to a package below the
    importer's in ORDER, or to the importer's own package."""
    up = sorted({f"{e.importer}:{e.line} imports {e.imported}" for e in all_edges()
                 if top(e.importer) != top(e.imported)
                 and LEVEL[top(e.imported)] >= LEVEL[top(e.importer)]})
    assert not up, "imports that point up the pipeline:\n  " + "\n  ".join(up)
