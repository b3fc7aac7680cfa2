"""No import cycle among the modules of mpdp/ and services/ (read statically with ast, so nothing is imported).

An edge A → B is any import of B that runs in A: at module level or inside a function (a lazy import is still a
dependency, it only runs later). Imports under ``if TYPE_CHECKING:`` are annotations and never run; they are left
out. Generated protobuf code (mpdp/messages) is a leaf and left out too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = {"mpdp": "mpdp", "services": "mpdp_services"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = TOPS[parts[0]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    out = {}
    for top in TOPS:
        for path in (ROOT / top).rglob("*.py"):
            if "messages" not in path.relative_to(ROOT).parts:
                out[_module(path)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imported(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """(module named, the names taken from it) of every import that runs, skipping ``if TYPE_CHECKING:`` bodies."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [a.name for a in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    def owner(name: str) -> str | None:
        if name.startswith("mpdp.messages"):
            return None
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for mod, path in modules.items():
        out: set[str] = set()
        for name, taken in _imported(ast.parse(path.read_text())):
            targets = [f"{name}.{t}" if f"{name}.{t}" in modules else name for t in taken] or [name]
            out |= {o for o in map(owner, targets) if o is not None and o != mod}
        edges[mod] = out
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycle_among_mpdp_and_services():
    modules = _modules()
    assert "mpdp.schema" in modules and "mpdp_services.curator.operations" in modules
    found = cycles(graph(modules))
    assert not found, "import cycles (each a set of modules that import each other):\n" + "\n".join(", ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import_and_ignores_type_checking():
    fake = {"mpdp.a": {"mpdp.b"}, "mpdp.b": {"mpdp.c"}, "mpdp.c": {"mpdp.a"}, "mpdp.d": {"mpdp.a"}}
    assert cycles(fake) == [["mpdp.a", "mpdp.b", "mpdp.c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mpdp.schema import Schema\n"
                     "def f():\n    from mpdp.data.sources import file_source\n")
    assert _imported(tree) == [("typing", ["TYPE_CHECKING"]), ("mpdp.data.sources", ["file_source"])]


def test_the_named_layers_import_downhill_only():
    """The general modules never import the protocols built on them."""
    edges = graph(_modules())
    protocols = ("mpdp.dpgd", "mpdp.regression", "mpdp.pathak2010", "mpdp.hamm2016", "mpdp.lmgc", "mpdp.dca")
    for low, banned in [("mpdp.accounting", protocols), ("mpdp.learn.logreg", ("mpdp.dp", *protocols)), ("mpdp.data.engine", protocols),
                        ("mpdp.data.sources", ("mpdp.schema",))]:
        assert not [e for e in edges[low] if e.startswith(banned)], (low, sorted(edges[low]))
