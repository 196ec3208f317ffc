"""The package's shape: imports form no cycle, modules stay small, the layout map is current.

Imports are read from the source with `ast`, including those inside functions (a lazy import is
still a dependency) and in `if TYPE_CHECKING:` blocks (a type-only import is one too: the layers
must read one way for a reader as well as for Python). An import
of a package's submodule does not count as depending on the package's `__init__`, since Python
runs that first in any case.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "toycards"
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.AST, here: str, is_package: bool, known=MODULES) -> set[str]:
    """Modules among `known` that `tree` imports."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".") if is_package else here.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in known else base)
        stack.extend(ast.iter_child_nodes(node))
    return {m for m in found if m in known and m != here}


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py")
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as a cycle path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_find_cycles_sees_a_cycle_through_a_lazy_or_type_only_import():
    src = {"toycards.a": "from toycards import b\n", "toycards.b": "def f():\n    import toycards.a\n"}
    graph = {m: _imports(ast.parse(s), m, False, src) for m, s in src.items()}
    assert find_cycles(graph) == [["toycards.a", "toycards.b"]]
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toycards import a\n"
    graph["toycards.b"] = _imports(ast.parse(guarded), "toycards.b", False, src)
    assert find_cycles(graph) == [["toycards.a", "toycards.b"]]  # a type-only import counts too


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" ↔ ".join(c) for c in cycles)


def test_the_engine_is_used_through_its_interface_only():
    """Outside toycards.engine, modules import the package (its __init__), never one of its modules;
    inside, the engine reads the runtime's context and nothing else of the runtime."""
    reach_in = [
        f"{m} → {d}"
        for m, deps in import_graph().items()
        for d in deps
        if d.startswith("toycards.engine.") and not m.startswith("toycards.engine")
    ]
    assert not reach_in, "past the engine's interface: " + "; ".join(sorted(reach_in))
    engine_uses = {
        d for m, deps in import_graph().items() if m.startswith("toycards.engine") for d in deps
    }
    runtime = {d for d in engine_uses if d.startswith("toycards.runtime")}
    assert runtime == {"toycards.runtime.context"}, runtime


def test_no_module_over_the_size_limit():
    long = {
        n: c for n, p in MODULES.items() if (c := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_package_map_names_every_sub_package():
    """The map in toycards/__init__.py has one line per sub-package, and no stale one."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")))
    listed = {
        line.split()[0].rstrip("/")
        for line in doc.splitlines()
        if line.startswith("    ") and "/" in line.split()[0]
    }
    actual = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert listed == actual
