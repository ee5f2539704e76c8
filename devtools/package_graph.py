"""The import graph between the runtime packages, at package level: each package's imports,
the mutual pairs and the strongly connected components (grimp; imports inside functions and
under TYPE_CHECKING count). The layers contract in pyproject.toml is what enforces it; this
prints what it looks like. Exit status 1 when there is a cycle.

    .venv/bin/python devtools/package_graph.py
"""

import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = [
    "access", "adminui", "api", "audit", "config", "core", "edge", "evals", "evidence", "knowledge",
    "mcp_server", "metrics", "modelcatalog", "registry", "retention", "sessions_app", "skills", "turns", "webhooks",
]  # fmt: skip


def package_edges(packages: list[str] = PACKAGES) -> dict[str, set[str]]:
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None)
    return {
        a: {b for b in packages if b != a and graph.direct_import_exists(importer=a, imported=b, as_packages=True)}
        for a in packages
    }


def mutual_pairs(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted({(a, b) if a < b else (b, a) for a in edges for b in edges[a] if a in edges.get(b, set())})


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, set()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    sys.path.insert(0, str(ROOT))
    edges = package_edges()
    for package in sorted(edges):
        print(f"{package:13} -> {' '.join(sorted(edges[package]))}")
    pairs, sccs = mutual_pairs(edges), components(edges)
    print(f"mutual pairs: {len(pairs)} {pairs}")
    print(f"strongly connected components: {sccs}")
    return 1 if sccs else 0


if __name__ == "__main__":
    raise SystemExit(main())
