"""Imports in dse/ run one way: no cycle, no import of a higher layer (issue 23).

The graph is read with `ast` (nothing is imported): every `import dse...` / `from dse... import`
at module level, inside functions (function-level imports are how cycles hide) AND under
`if TYPE_CHECKING:` (a type a module names is a dependency too: issue 36 found a cycle and an
upward import that hid there). Run as a script for the report:

    python tests/repo/test_import_layers.py [ROOT]      # edges, cycles, upward imports

KNOWN_CYCLES and KNOWN_UPWARD list accepted violations (both empty since issue 23's moves): the
tests fail on a new one AND on a listed one that is gone, so the lists only shrink.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = "dse"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Edge:
    src: str  # importing module, dotted
    dst: str  # imported dse module (a symbol import resolves to its module)
    line: int
    scope: str  # "module", "function" (inside a def/lambda) or "typing" (if TYPE_CHECKING)


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for p in sorted((root / PKG).rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _module_of(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _edges_of(mod: str, path: Path, mods: dict[str, Path]) -> set[Edge]:
    is_pkg = path.name == "__init__.py"
    out: set[Edge] = set()

    def add(target: str, line: int, scope: str) -> None:
        dst = _module_of(target, mods)
        if dst and dst != mod:
            out.add(Edge(mod, dst, line, scope))

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            s = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                s = "function"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                s = "typing" if scope == "module" else scope
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name == PKG or a.name.startswith(PKG + "."):
                        add(a.name, child.lineno, s)
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: resolve against this module's package
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target == PKG or target.startswith(PKG + "."):
                    for a in child.names:  # `from dse.x import y` may import module dse.x.y
                        full = f"{target}.{a.name}"
                        add(full if full in mods else target, child.lineno, s)
            visit(child, s)

    visit(ast.parse(path.read_text(), filename=str(path)), "module")
    return out


def graph(root: Path = ROOT) -> list[Edge]:
    mods = modules(root)
    return sorted(
        (e for m, p in mods.items() for e in _edges_of(m, p, mods)),
        key=lambda e: (e.src, e.line, e.dst),
    )


SCOPES = ("module", "function", "typing")  # every import counts


def cycles(edges: list[Edge], scopes: tuple[str, ...] = SCOPES) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    adj: dict[str, set[str]] = {}
    for e in edges:
        if e.scope in scopes:
            adj.setdefault(e.src, set()).add(e.dst)
    nodes = sorted(set(adj) | {d for v in adj.values() for d in v})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(adj.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def cycle_path(comp: list[str], edges: list[Edge]) -> list[str]:
    """One shortest cycle through the first module of a component (for messages)."""
    inside = set(comp)
    adj: dict[str, set[str]] = {}
    for e in edges:
        if e.src in inside and e.dst in inside:
            adj.setdefault(e.src, set()).add(e.dst)
    start = comp[0]
    prev: dict[str, str] = {}
    q = deque([start])
    while q:
        v = q.popleft()
        for w in sorted(adj.get(v, ())):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if w not in prev:
                prev[w] = v
                q.append(w)
    return comp


# Layers, lowest first: a module may import its own layer or a lower one (a prefix names a
# module or a package; the longest matching prefix decides). The house of issue 23
# (docs/design.md): commands -> report -> sweep -> fitting -> estimators -> data -> predict ->
# models -> roofline -> spec -> base.
TARGET_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "dse.errors",
            "dse.files",
            "dse._heap",  # the C heap setting of bulk predictions and exact sweeps
            "dse._same",  # one-value checks of columns (fixed-width texts by their bytes)
            "dse.metrics",
            "dse.resources",
            "dse.yamlio",
            "dse.hardware_specs",
        ),
    ),
    ("spec", ("dse.spec",)),  # choices < hardware < fields < arch/workload < columns < ...
    ("roofline", ("dse.roofline",)),
    (
        "models-base",
        ("dse.models.base", "dse.models._nn", "dse.models._curves", "dse.models._hybrid"),
    ),
    ("models", ("dse.models",)),  # the classes, MODEL_CLASSES and the artifact container
    ("predict", ("dse.predict",)),
    ("data", ("dse.data",)),  # readers of measured files: below the estimators, which use them
    ("estimators", ("dse.estimators",)),
    ("fitting", ("dse.fitting",)),
    ("sweep", ("dse.pareto", "dse.sweep")),
    ("report", ("dse.report",)),
    ("profile", ("dse.profile",)),
    ("commands", ("dse.commands", "dse.cli", "dse.__main__")),
]
LAYERS = TARGET_LAYERS

# Violations left (none since issue 23's moves); a new one fails the tests, a listed one that is
# gone fails them too, so the lists only shrink.
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_UPWARD: set[tuple[str, str]] = set()


# A module whose name starts with `_` is private to its package: only modules of that package
# (or of its subpackages) import it. None left (issue 36: models.base and models.moe_splits made
# public); a new one fails the tests.
KNOWN_PRIVATE: set[tuple[str, str]] = set()


def private_imports(edges: list[Edge]) -> set[tuple[str, str]]:
    """(importer, private module) for every import of a `_` module from outside its package."""
    out = set()
    for e in edges:
        owner, _, last = e.dst.rpartition(".")
        if not last.startswith("_") or last.startswith("__"):
            continue
        if e.src != owner and not e.src.startswith(owner + "."):
            out.add((e.src, e.dst))
    return out


def layer_of(mod: str, layers: list[tuple[str, tuple[str, ...]]] | None = None) -> tuple[int, str]:
    if mod == PKG:  # dse/__init__.py holds __version__ only
        return 0, "base"
    best = (-1, "unlisted", 0)
    for i, (name, prefixes) in enumerate(layers or LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best[2]:
                best = (i, name, len(p))
    return best[0], best[1]


def upward(edges: list[Edge]) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> ["line scope", ...] for every import of a higher layer."""
    out: dict[tuple[str, str], list[str]] = {}
    for e in edges:
        if layer_of(e.dst)[0] > layer_of(e.src)[0]:
            out.setdefault((e.src, e.dst), []).append(f"{e.line} {e.scope}")
    return out


# ---------------------------------------------------------------------------------- tests
def test_every_module_has_a_layer() -> None:
    unlisted = [m for m in modules() if layer_of(m)[0] < 0]
    assert not unlisted, f"modules without a layer in LAYERS: {unlisted}"


@pytest.mark.slow
def test_no_new_import_cycle() -> None:
    edges = graph()
    found = {frozenset(c) for c in cycles(edges)}
    new = [cycle_path(sorted(c), edges) for c in found - KNOWN_CYCLES]
    assert not new, "import cycles: " + "; ".join(" -> ".join(p) for p in new)
    gone = KNOWN_CYCLES - found
    assert not gone, f"cycles fixed, remove from KNOWN_CYCLES: {[sorted(c) for c in gone]}"


@pytest.mark.slow
def test_no_new_upward_import() -> None:
    ups = upward(graph())
    new = {k: v for k, v in ups.items() if k not in KNOWN_UPWARD}
    assert not new, "upward imports: " + "; ".join(
        f"{a} [{layer_of(a)[1]}] -> {b} [{layer_of(b)[1]}] at line {', '.join(v)}"
        for (a, b), v in sorted(new.items())
    )
    gone = KNOWN_UPWARD - set(ups)
    assert not gone, f"upward imports fixed, remove from KNOWN_UPWARD: {sorted(gone)}"


@pytest.mark.slow
def test_no_new_private_import_across_packages() -> None:
    found = private_imports(graph())
    new = sorted(found - KNOWN_PRIVATE)
    assert not new, "private modules imported from another package: " + "; ".join(
        f"{a} -> {b}" for a, b in new
    )
    gone = KNOWN_PRIVATE - found
    assert not gone, f"fixed, remove from KNOWN_PRIVATE: {sorted(gone)}"


def test_private_import_rule_sees_a_cross_package_import(tmp_path: Path) -> None:
    pkg = tmp_path / PKG
    (pkg / "sweep").mkdir(parents=True)
    (pkg / "commands").mkdir()
    for d in (pkg, pkg / "sweep", pkg / "commands"):
        (d / "__init__.py").write_text("")
    (pkg / "sweep" / "_fronts.py").write_text("X = 1\n")
    (pkg / "sweep" / "_run.py").write_text("from dse.sweep._fronts import X\n")
    (pkg / "commands" / "show.py").write_text("from dse.sweep._fronts import X\n")
    assert private_imports(graph(tmp_path)) == {("dse.commands.show", "dse.sweep._fronts")}


def test_type_checking_imports_count(tmp_path: Path) -> None:
    """An import only a type annotation needs still makes a cycle and an upward import."""
    pkg = tmp_path / PKG
    (pkg / "models").mkdir(parents=True)
    (pkg / "predict").mkdir()
    for d in (pkg, pkg / "models", pkg / "predict"):
        (d / "__init__.py").write_text("")
    (pkg / "models" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dse.predict.b import B\n"
    )
    (pkg / "predict" / "b.py").write_text("from dse.models.a import A\n")
    edges = graph(tmp_path)
    assert {(e.src, e.dst, e.scope) for e in edges} >= {
        ("dse.models.a", "dse.predict.b", "typing"),
        ("dse.predict.b", "dse.models.a", "module"),
    }
    assert cycles(edges) == [["dse.models.a", "dse.predict.b"]]
    assert ("dse.models.a", "dse.predict.b") in upward(edges)


def main(root: Path) -> int:
    edges = graph(root)
    print(
        f"{len(modules(root))} modules, {len(edges)} edges: "
        f"{sum(e.scope == 'module' for e in edges)} module level, "
        f"{sum(e.scope == 'function' for e in edges)} in functions, "
        f"{sum(e.scope == 'typing' for e in edges)} TYPE_CHECKING"
    )
    for title, scopes in (
        ("module level", ("module",)),
        ("module + function level", ("module", "function")),
        ("every import, TYPE_CHECKING included", SCOPES),
    ):
        comps = cycles(edges, scopes)
        print(f"\ncycles, {title}: {len(comps)}")
        for c in comps:
            print("  " + " -> ".join(cycle_path(c, [e for e in edges if e.scope in scopes])))
    print("\nupward imports (line scope):")
    for (a, b), v in sorted(upward(edges).items()):
        print(f"  {a} [{layer_of(a)[1]}] -> {b} [{layer_of(b)[1]}]: {', '.join(v)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
