"""The import graph of broker/ has no circle and no import from a lower layer to a higher one
(issue 33 item 5; STYLE §9 and §10).

The graph is built from the source, every import counted: top-level ones, those under
`if TYPE_CHECKING:` (a type-only import is still a dependency a reader follows) and those
inside functions. The layers are the ones docs/architecture.md declares in its "Layers"
table, lowest first; a module belongs to the layer of the longest name in that table that
is it or a package containing it. The test fails on a circle, on an upward import, on a
module of broker/ that no layer holds, on a package of broker/ the page does not name, and on
a name in the table that is no module of broker/. It prints the graph's size so the closing
note can quote it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"


def modules() -> dict[str, Path]:
    """broker's modules by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((ROOT / "broker").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules
    return {m for m in found if m in known and m != name}


def declared_layers() -> list[tuple[str, list[str]]]:
    """(layer name, [module or package names]) from the page's "Layers" table, lowest
    first: rows `| N | name | `a`, `b.c`, ... |`."""
    text = PAGE.read_text(encoding="utf-8")
    section = re.split(r"\n## (?:\d+\. )?Layers\n", text, maxsplit=1)[1].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            layers.append((cells[1], re.findall(r"`(broker(?:\.[\w]+)*)`", cells[2])))
    return layers


def layer_of(module: str, table: dict[str, int]) -> int | None:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        level = table.get(".".join(parts[:i]))
        if level is not None:
            return level
    return None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_import_graph_has_no_circle_and_follows_the_layers() -> None:
    mods = modules()
    known = set(mods)
    edges = {name: imports(name, path, known) for name, path in mods.items()}
    layers = declared_layers()
    assert layers, f"{PAGE} has no Layers table"
    table: dict[str, int] = {}
    for level, (_layer, names) in enumerate(layers):
        for name in names:
            assert name not in table, f"{name} is in two layers of {PAGE.name}"
            table[name] = level
    stale = sorted(n for n in table if n not in known)
    assert not stale, f"{PAGE.name} names what is no module of broker/: {stale}"
    unplaced = sorted(m for m in mods if layer_of(m, table) is None)
    assert not unplaced, f"modules in no layer of {PAGE.name}: {unplaced}"
    page = PAGE.read_text(encoding="utf-8")
    packages = sorted(m for m, p in mods.items() if p.name == "__init__.py")
    unnamed = [p for p in packages if f"`{p}`" not in page and f"`{p.replace('.', '/')}/`" not in page]
    assert not unnamed, f"packages of broker/ that {PAGE.name} does not name: {unnamed}"
    upward = sorted(
        f"{a} ({layers[layer_of(a, table)][0]}) -> {b} ({layers[layer_of(b, table)][0]})"
        for a, targets in edges.items() for b in targets
        if layer_of(b, table) > layer_of(a, table))  # type: ignore[operator]
    circles = cycles(edges)
    print(f"\nimport graph of broker/: {len(mods)} modules, "
          f"{sum(len(t) for t in edges.values())} imports, {len(layers)} layers; "
          f"{len(circles)} circles, {len(upward)} upward imports")
    assert not circles, "import circles: " + "; ".join(", ".join(c) for c in circles)
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_the_cycle_finder_finds_a_circle() -> None:
    """The checker itself can fail: a two-module and a three-module circle are found, a
    chain is not."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}, "g": set()}
    assert sorted(cycles(edges)) == [["a", "b"], ["c", "d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_file_cites_the_architecture_outside_the_repository() -> None:
    """The design lives in docs/architecture.md: no file of the repository sends its reader to
    shared/ARCHITECTURE.md (which a clone does not have) or its sections, and the README
    links the page."""
    pattern = re.compile("ARCHITECTURE" + r"(\.md| §)")
    citing = []
    for top in ("README.md", "docs", "broker", "tests", "bench", "spark_jobs", "examples",
                "pybroker_pytest"):
        base = ROOT / top
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in paths:
            if path.suffix not in (".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".sh"):
                continue
            if path == Path(__file__).resolve():
                continue  # this test names what it looks for
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    citing.append(f"{path.relative_to(ROOT)}:{number}")
    assert not citing, f"cite docs/architecture.md instead: {citing}"
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
