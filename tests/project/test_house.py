"""The house limits on application code: no file over 600 lines, no function above cyclomatic
complexity 20 (radon's measure, the one `radon cc` prints). Application code is every Python
file of the repository except tests/, bench/, chaos/, eval/, clients/ and migrations.

A file or function over a limit is split (phases become functions, subjects become modules).
The allowlists below may name one that other work in progress still owns, each entry saying
who; they are empty now. An entry that no longer exceeds its limit fails the test too, so the
lists only shrink.

Reproduce the figures: `radon cc -n D -s <package>` and `wc -l`.
"""

import ast
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

ROOT = Path(__file__).resolve().parents[2]

MAX_LINES = 600
MAX_COMPLEXITY = 20

# Not application code: tools, tests, generated or third-party trees.
EXCLUDED_DIRS = {"tests", "bench", "chaos", "eval", "clients", "migrations", "node_modules", "build"}

# path -> owner. Files over MAX_LINES that another change in progress is splitting (none now:
# an entry is a debt with a name on it, removed by the change that pays it).
LONG_FILES: dict[str, str] = {}

# "path:qualified name" -> owner. Functions above MAX_COMPLEXITY that another change owns (none).
COMPLEX_FUNCTIONS: dict[str, str] = {}


def application_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if any(part in EXCLUDED_DIRS or part.startswith(".") for part in parts[:-1]):
            continue
        files.append(path)
    return sorted(files)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def long_files() -> dict[str, int]:
    found = {}
    for path in application_files():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found[_rel(path)] = lines
    return found


def complex_functions() -> dict[str, int]:
    found = {}
    for path in application_files():
        for block in cc_visit(path.read_text(encoding="utf-8")):
            if isinstance(block, Function) and block.complexity > MAX_COMPLEXITY:
                found[f"{_rel(path)}:{block.fullname}"] = block.complexity
    return found


def test_it_sees_the_application_packages():
    names = {path.parts[0] for path in (p.relative_to(ROOT) for p in application_files()) if len(path.parts) > 1}
    assert {"registry", "sessions_app", "api", "adminui", "config", "core", "skills"} <= names
    assert not names & {"tests", "bench", "chaos", "eval", "clients"}


def test_no_application_file_is_over_600_lines():
    found = long_files()
    new = {path: lines for path, lines in found.items() if path not in LONG_FILES}
    assert not new, f"over {MAX_LINES} lines (split by subject): {new}"
    stale = sorted(set(LONG_FILES) - set(found))
    assert not stale, f"within the limit now; remove from LONG_FILES: {stale}"


def test_no_application_function_is_above_complexity_20():
    found = complex_functions()
    new = {name: cc for name, cc in found.items() if name not in COMPLEX_FUNCTIONS}
    assert not new, f"cyclomatic complexity over {MAX_COMPLEXITY} (split into phases): {new}"
    stale = sorted(set(COMPLEX_FUNCTIONS) - set(found))
    assert not stale, f"within the limit now; remove from COMPLEX_FUNCTIONS: {stale}"


def test_the_admin_views_run_no_query_of_their_own():
    """adminui/views/ is an entry point: its reads are adminui.selectors (or the owning app's
    selectors), its writes services. A query in a view is a read nobody else can reuse."""
    found = []
    for path in sorted((ROOT / "adminui" / "views").glob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(word in line for word in (".objects.", ".history.", "connection.", "cursor(")):
                found.append(f"{_rel(path)}:{number}: {line.strip()}")
    assert not found, found


def private_imports(source: str, package: str) -> list[str]:
    """`from <package>.x import _name` and `<module of package>._name` in `source`: a private
    name of one module used by another (dunders are not private)."""
    found, modules = [], set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.lineno}: {node.module}.{alias.name}")
                else:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name.split(".")[0] == package}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_of_api_uses_another_ones_private_names():
    """api/ shares what several modules need through public names (api/common.py, or the
    subject module that owns it; docs/architecture.md, The API package)."""
    found = []
    for path in sorted((ROOT / "api").rglob("*.py")):
        found += [f"{_rel(path)}:{hit}" for hit in private_imports(path.read_text(encoding="utf-8"), "api")]
    assert not found, found
    # The negative control: both forms are caught, a public name and a dunder are not.
    source = "from api.common import valid, _x\nfrom api import views\nviews._y\nviews.__doc__"
    assert private_imports(source, "api") == ["1: api.common._x", "3: views._y"]


def test_the_measure_counts_branches():
    # The negative control: a function with 21 branches is caught, one with 19 is not.
    def source(branches: int) -> str:
        body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(branches))
        return f"def f(x):\n{body}    return -1\n"

    assert [b.complexity for b in cc_visit(source(21))] == [22]
    assert [b.complexity for b in cc_visit(source(19))] == [20]
