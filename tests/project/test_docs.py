"""The documentation stays true to the code and the repository stays self-contained: every
environment variable the code reads is in the configuration table, every link in the README
and docs/ points at a file that exists, and nothing refers to files outside the repository."""

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
# Where the service and the `make run`/`make test` stack read their environment.
ENV_READERS = sorted([*(ROOT / "config").glob("*.py"), *(ROOT / "devtools").glob("*.py")])


def _env_reads(path: Path) -> set[str]:
    """Names read from the environment in `path`: env_str/env_int/env_bool("X", ...) (and any
    other env_* helper), os.environ.get("X"), os.environ["X"] (not as an assignment target),
    os.environ.setdefault("X", ...) and os.getenv("X"). Parsed, not grepped, so a read split
    over lines or written with single quotes is found too."""
    names: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))

    def constant(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    stores = {id(node.targets[0]) for node in ast.walk(tree) if isinstance(node, ast.Assign) and node.targets}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func, first = node.func, constant(node.args[0])
            if first is None:
                continue
            if isinstance(func, ast.Name) and func.id.startswith("env_"):
                names.add(first)
            elif isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault") and is_environ(func.value):
                names.add(first)
            elif isinstance(func, ast.Attribute) and func.attr == "getenv":
                names.add(first)
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and id(node) not in stores:
            name = constant(node.slice)
            if name is not None:
                names.add(name)
    return names


def _documented_variables() -> set[str]:
    """The names in the first column of docs/operations.md's configuration table."""
    text = OPERATIONS.read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "docs/operations.md lost its configuration table"
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split("|")[1])}


def test_the_env_scanner_finds_reads_of_every_form(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "import os\n"
        "A = env_int('ALPHA', 1)\n"
        'B = env_str(\n    "BETA",\n)\n'
        'os.environ["GAMMA"] = "written, not read"\n'
        'D = os.environ["DELTA"]\n'
        'os.environ.setdefault("EPSILON", "x")\n'
        'F = os.getenv("ZETA")\n'
        'G = os.environ.get("ETA", "")\n'
    )
    assert _env_reads(source) == {"ALPHA", "BETA", "DELTA", "EPSILON", "ZETA", "ETA"}


def test_the_configuration_table_lists_every_variable_the_code_reads():
    documented = _documented_variables()
    missing = {}
    for path in ENV_READERS:
        for name in _env_reads(path) - documented:
            missing.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"add these to the configuration table in docs/operations.md: {missing}"
    # The table's own spot checks: variables issue 8 found missing.
    assert {"DJANGO_HSTS_SECONDS", "DB_CONN_MAX_AGE", "DB_CONN_HEALTH_CHECKS", "CELERY_BROKER_URL", "LOG_LEVEL"} <= (
        documented
    )


def _tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.stdout.splitlines() if (ROOT / name).is_file()]


def test_nothing_in_the_repository_points_outside_it():
    outside = "../" + "shared"  # spelled in two parts so that this file does not match itself
    offenders = []
    for path in _tracked_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # images
        if outside in text or "/work/" + "shared" in text:
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"these files refer to files outside the repository: {offenders}"


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_every_relative_link_points_at_a_file_in_the_repository(doc):
    path = ROOT / doc if doc == "README.md" else ROOT / "docs" / doc
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # absolute URLs and anchors
        resolved = (path.parent / target.split("#", 1)[0]).resolve()
        assert resolved.is_relative_to(ROOT), f"{doc} links outside the repository: {target}"
        assert resolved.exists(), f"{doc} links to {target}, which does not exist"


def test_the_readme_links_every_document_in_docs():
    readme = (ROOT / "README.md").read_text()
    for path in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{path.name})" in readme, f"add docs/{path.name} to the README's Documentation list"


def _operations() -> list[tuple[str, str, dict]]:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [(method.upper(), path, op) for path, ops in schema["paths"].items() for method, op in ops.items()]


def test_every_operation_describes_itself_in_the_openapi_document():
    """Not the base view's docstring (about the code, and once on 17 of 20 operations), not
    empty, and a summary of its own, so the docs page tells the operations apart."""
    from api.common import BaseApi

    internal = {"Base of every view here: refuses path values no row can hold before any query runs."}
    internal |= {" ".join(BaseApi.__doc__.split())} if BaseApi.__doc__ else set()
    operations = _operations()
    assert len(operations) >= 20
    summaries: dict[str, str] = {}
    for method, path, op in operations:
        where = f"{method} {path}"
        description = " ".join(op.get("description", "").split())
        assert description, f"{where} has no description: give it extend_schema(description=...) or a docstring"
        assert not any(text in description for text in internal), f"{where} shows the base view's docstring"
        summary = op.get("summary", "").strip()
        assert summary, f"{where} has no summary"
        assert summary not in summaries, f"{where} and {summaries.get(summary)} share the summary {summary!r}"
        summaries[summary] = where


def test_the_schema_class_never_shows_an_inherited_docstring():
    from rest_framework.views import APIView

    from api.schema import AutoSchema

    class Base(APIView):
        """Internal: about the code."""

    class Plain(Base):
        def get(self, request):
            pass

    class Documented(Base):
        """What this resource is."""

        def get(self, request):
            """Fetch it."""

        def put(self, request):
            pass

    def describe(view_class: type, method: str) -> tuple[str, str | None]:
        schema = AutoSchema()
        schema.view, schema.method, schema.path = view_class(), method, "/x/"
        return schema.get_description(), schema.get_summary()

    assert describe(Plain, "GET") == ("", None)
    assert describe(Documented, "GET") == ("Fetch it.", "Fetch it")
    assert describe(Documented, "PUT") == ("What this resource is.", "What this resource is")


def test_the_development_layout_names_every_top_level_folder():
    """docs/development.md's layout names each folder a newcomer finds in a checkout."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {line.split("/")[0] for line in tracked.splitlines() if "/" in line and not line.startswith(".")}
    text = (ROOT / "docs" / "development.md").read_text()
    layout = text[text.index("- Layout:") :]
    missing = sorted(folder for folder in folders if f"`{folder}/`" not in layout)
    assert not missing, f"docs/development.md's layout does not name {missing}"
