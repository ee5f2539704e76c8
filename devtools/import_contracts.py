"""An import-linter contract type that import-linter lacks: no import cycle between any two
modules of the listed packages, across apps as well as inside one (acyclic_siblings only
compares siblings of one parent). Imports inside functions count: a cycle hidden in a
function is still a cycle. Registered in pyproject.toml's [tool.importlinter]."""

from typing import cast

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each
    sorted; `edges` maps a module to the modules it imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
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
                    work.append((child, iter(sorted(edges.get(child, ())))))
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
                    found.append(sorted(component))
    return sorted(found)


class AcyclicModulesContract(Contract):
    """Options: `packages`, the packages whose modules may not import each other in a cycle."""

    type_name = "acyclic_modules"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots = tuple(cast("list[str]", self.packages))
        ours = {m for m in graph.modules if m in roots or m.startswith(tuple(f"{p}." for p in roots))}
        edges = {m: graph.find_modules_directly_imported_by(m) & ours for m in ours}
        found = cycles(edges)
        return ContractCheck(kept=not found, warnings=[], metadata={"cycles": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for component in check.metadata["cycles"]:
            output.print_error(f"These modules import each other in a cycle: {', '.join(component)}")
            output.new_line()
